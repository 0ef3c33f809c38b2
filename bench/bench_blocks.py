"""Model blocks end to end (issue 68 item 3): torch eager, torch.compile(mode="max-autotune"), the block
after gemmtune.torch.optimize() eagerly, and optimized + torch.compile(max-autotune), in one run.

    PYTHONPATH=$PWD/src python bench/bench_blocks.py --quick --out bench/results/2026-11-29-h200-blocks.md
    PYTHONPATH=$PWD/src python bench/bench_blocks.py --budget 300 --blocks llama-prefill,vit

Blocks, bf16, random weights, sizes from bench/model_shapes.py's published configs (no downloads):
- llama-prefill: a Llama-3-8B decoder layer (hidden 4096, 32 heads, 8 KV heads of 128, SwiGLU MLP 14336,
  RMSNorm), 2048 tokens at batch 1, causal F.scaled_dot_product_attention (no rotary embedding: it
  changes no GEMM);
- llama-decode: the same layer, 16 sequences of one new token each, over a KV cache of 512 tokens;
- vit: a ViT-B/16 encoder block (hidden 768, 12 heads, MLP 3072, erf GELU), batch 32 x 197 tokens.
  optimize() fuses its GELU as the kernels' tanh form (erf_gelu_atol=1e-3: the two differ by at most
  4.74e-4, under half a bf16 step of any output above 1/8).
- mixtral-moe: a Mixtral-8x7B MoE layer (hidden 4096, 8 experts of SwiGLU MLP 14336, top-2), 2048 tokens
  (prefill), RMSNorm and residual; qwen3-moe: Qwen3-30B-A3B's (hidden 2048, 128 experts of 768, top-8), the
  same. Router (nn.Linear, top-k, softmax over the k), the tokens' copies sorted by expert and the offsets
  computed on the device (no host sync in forward), gate/up one GroupedLinear with swiglu, down another,
  the outputs weighted and scatter-added back. optimize() sees the router as a Linear site and each
  GroupedLinear as a grouped site timed on the rows the example forward routed to each expert.
Times: median of CUDA-event-timed forwards without grad, the four columns in alternating rounds (one
forward of each a round, the order rotated) once all are built and warm (compiled: after warm-up calls
that compile and autotune). GEMM share: Σ calls x torch's time for each Linear (F.linear + its activation, as optimize()
timed it in CUDA graphs) and each GroupedLinear (torch._grouped_mm + its bias/activation) over the eager
block's time; the products inside SDPA are not counted.
--calls: only the host cost per eager call, torch.mm against gemmtune.torch.mm at 1x4096x4096 and 64x64x64
(issue 68's bar), 3 rounds of 300 calls in a loop synchronised at the end, median; on sm_90a also a small
SwiGLU GroupedLinear (8 experts, 256 -> 128, 64 rows): its torch path (torch._grouped_mm, silu, mul), its routed
path (grouped_calls' plan), gemmtune.torch.grouped_mm (the same plans, b the weights' (G, K, 2F) view), the
operator gemmtune::grouped_mm called directly (the dispatcher, then the plans: what torch.compile'd or autograd
calls pay) and torch._grouped_mm alone, with the launches bound over all these calls (a few first binds: the
calls reused their plans' bound launches).
--quick: budget 0 (the chooser's untuned picks, timed and routed) and fewer samples (about 4 minutes on
an H200, mostly inductor's autotuning). --budget: seconds of gemmtune tuning per block.
"""
from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import dataclass
from typing import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_shapes import LLAMA3_8B, MIXTRAL_EXPERTS, QWEN3_EXPERTS, VIT_B16, Experts  # noqa: E402

from gemmtune.torch.experts import GroupedLinear  # noqa: E402
from gemmtune.torch.grouped_calls import grouped_plan_stats  # noqa: E402
from gemmtune.torch.operators import plan_stats  # noqa: E402
from gemmtune.torch.optimize_model import interleaved_seconds, optimize  # noqa: E402

BF16 = torch.bfloat16


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (x.float() * scale).to(x.dtype) * self.weight


class LlamaLayer(nn.Module):
    """One decoder layer; with `cache` > 0 each call attends over that many cached tokens plus its own."""

    def __init__(self, batch: int = 1, cache: int = 0, c=LLAMA3_8B):
        super().__init__()
        self.heads, self.kv, self.hd = c.heads, c.kv_heads, c.head_dim
        width = c.heads * c.head_dim
        self.q_proj, self.o_proj = nn.Linear(c.hidden, width, bias=False), nn.Linear(width, c.hidden, bias=False)
        self.k_proj, self.v_proj = (nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False) for _ in range(2))
        self.gate_proj, self.up_proj = (nn.Linear(c.hidden, c.intermediate, bias=False) for _ in range(2))
        self.down_proj = nn.Linear(c.intermediate, c.hidden, bias=False)
        self.norm1, self.norm2 = RMSNorm(c.hidden), RMSNorm(c.hidden)
        self.cache = cache
        if cache:
            self.register_buffer("k_cache", torch.randn(batch, c.kv_heads, cache, c.head_dim))
            self.register_buffer("v_cache", torch.randn(batch, c.kv_heads, cache, c.head_dim))

    def heads_of(self, y: torch.Tensor, heads: int) -> torch.Tensor:
        return y.view(y.shape[0], y.shape[1], heads, self.hd).transpose(1, 2)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.heads_of(self.q_proj(x), self.heads)
        k, v = self.heads_of(self.k_proj(x), self.kv), self.heads_of(self.v_proj(x), self.kv)
        if self.cache:
            k, v = torch.cat([self.k_cache, k], 2), torch.cat([self.v_cache, v], 2)
        k, v = (z.repeat_interleave(self.heads // self.kv, 1) for z in (k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=not self.cache)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, self.heads * self.hd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        h = self.norm2(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class VitBlock(nn.Module):
    def __init__(self, c=VIT_B16, heads: int = 12):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(c.hidden, eps=1e-6), nn.LayerNorm(c.hidden, eps=1e-6)
        self.qkv, self.proj = nn.Linear(c.hidden, 3 * c.hidden), nn.Linear(c.hidden, c.hidden)
        self.fc1, self.act = nn.Linear(c.hidden, c.intermediate), nn.GELU()
        self.fc2 = nn.Linear(c.intermediate, c.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class MoeBlock(nn.Module):
    """An MoE layer: x + Σ over each token's top-k experts of weight · SwiGLU expert(RMSNorm(x)). Every step
    runs on the device, without reading anything on the host (CUDA graphs and torch.compile take it whole)."""

    def __init__(self, c: Experts, device=None, dtype=None):
        super().__init__()
        self.top_k, self.hidden = c.experts_per_token, c.hidden
        self.norm = RMSNorm(c.hidden)
        self.router = nn.Linear(c.hidden, c.experts, bias=False, device=device, dtype=dtype)
        self.gate_up = GroupedLinear(c.experts, c.hidden, c.expert_intermediate, activation="swiglu", device=device,
                                     dtype=dtype)
        self.down = GroupedLinear(c.experts, c.expert_intermediate, c.hidden, device=device, dtype=dtype)
        self.register_buffer("expert_ids", torch.arange(c.experts, device=device), persistent=False)

    def route(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(token of each sorted row, its routing weight, offs): the T·k (token, expert) pairs sorted by expert,
        offs (G,) int32 the cumulative ends of each expert's rows."""
        weights, experts = self.router(h).topk(self.top_k, dim=-1)
        weights = weights.float().softmax(-1).to(h.dtype)
        sorted_experts, order = experts.reshape(-1).sort(stable=True)
        offs = torch.searchsorted(sorted_experts, self.expert_ids, right=True).to(torch.int32)
        return order // self.top_k, weights.reshape(-1)[order], offs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x).reshape(-1, self.hidden)
        token, weight, offs = self.route(h)
        y = self.down(self.gate_up(h[token], offs), offs) * weight[:, None]
        return x + h.new_zeros(h.shape).index_add_(0, token, y).view(x.shape)


BLOCKS = {"llama-prefill": (lambda: LlamaLayer(), (1, 2048, LLAMA3_8B.hidden)),
          "llama-decode": (lambda: LlamaLayer(batch=16, cache=512), (16, 1, LLAMA3_8B.hidden)),
          "vit": (lambda: VitBlock(), (32, 197, VIT_B16.hidden)),
          "mixtral-moe": (lambda: MoeBlock(MIXTRAL_EXPERTS, "cuda", BF16), (1, 2048, MIXTRAL_EXPERTS.hidden)),
          "qwen3-moe": (lambda: MoeBlock(QWEN3_EXPERTS, "cuda", BF16), (1, 2048, QWEN3_EXPERTS.hidden))}


@dataclass(frozen=True)
class Row:
    block: str
    eager_s: float
    compiled_s: float | None
    optimized_s: float
    optimized_compiled_s: float | None
    gemm_share: float
    routed: str
    max_error: float
    report: str


def compiled(model: nn.Module, x: torch.Tensor) -> Callable[[], torch.Tensor] | None:
    """max-autotune (CUDA graphs included), compiled and autotuned by warm-up calls here; None with a
    line on stderr when inductor fails."""
    fn = torch.compile(model, mode="max-autotune")
    try:
        for _ in range(5):
            fn(x)
        return lambda: fn(x)
    except Exception as err:  # noqa: BLE001 - a compiler failure is this cell's result, not the run's end
        print(f"bench_blocks: torch.compile failed: {type(err).__name__}: {str(err).splitlines()[0]}", file=sys.stderr)
        return None


def run_block(name: str, args: argparse.Namespace) -> Row:
    """The four columns timed in alternating rounds (interleaved_seconds: one forward of each a round,
    order rotated), after every one is built, compiled and warm: eager blocks are host-bound, and a host
    that drifts over the run would otherwise favour whichever column ran first."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    factory, shape = BLOCKS[name]
    model, x = factory().cuda().to(BF16).eval(), torch.randn(*shape, device="cuda", dtype=BF16)
    with torch.no_grad():
        want = model(x).float()
        optimized = copy.deepcopy(model)
        report = optimize(optimized, (x,), budget=args.budget, db=args.db, erf_gelu_atol=1e-3)
        error = float((optimized(x).float() - want).norm() / want.norm())
        fns = {"eager": lambda: model(x), "optimized": lambda: optimized(x)}
        for key, m in (("compiled", model), ("optimized_compiled", optimized)):
            fn = compiled(m, x)
            if fn is not None:
                fns[key] = fn
        binds = _binds()
        times = interleaved_seconds(fns, args.samples)
        binds = _binds() - binds  # launches bound during the timed forwards (single and grouped): 0 once warm
    sites = (*report.fused, *report.layers, *report.grouped)  # fused: residual adds and SwiGLU (fusion.py)
    gemm_s = sum(p.site.calls * p.timing.torch_s for p in sites if p.timing.torch_s)
    routed = f"{sum(p.routed for p in sites)}/{len(sites)}"
    notes = f"{report.table()}\n\nLaunches bound during the timed forwards: {binds}."
    return Row(name, times["eager"], times.get("compiled"), times["optimized"], times.get("optimized_compiled"),
               gemm_s / times["eager"], routed, error, notes)


def _binds() -> int:
    return plan_stats()["binds"] + grouped_plan_stats()["binds"]


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.3f}" if seconds else "failed"


def _x(before: float | None, after: float | None) -> str:
    return f"{before / after:.2f}" if before and after else "—"


def table(rows: list[Row]) -> str:
    lines = ["| block | eager ms | compile ms | optimized ms | optimized+compile ms | opt/eager × | "
             "opt+compile/compile × | GEMM share | routed | rel. error |", "|---|" + "---:|" * 9]
    for r in rows:
        lines.append(f"| {r.block} | {_ms(r.eager_s)} | {_ms(r.compiled_s)} | {_ms(r.optimized_s)} | "
                     f"{_ms(r.optimized_compiled_s)} | {_x(r.eager_s, r.optimized_s)} | "
                     f"{_x(r.compiled_s, r.optimized_compiled_s)} | {100 * r.gemm_share:.0f}% | {r.routed} | "
                     f"{r.max_error:.1e} |")
    return "\n".join(lines)


# --- host cost per eager call (--calls) -------------------------------------------------------------
CALL_SHAPES = ((1, 4096, 4096), (64, 64, 64))


def _per_call(fn, loops: int, rounds: int) -> float:
    """Median over `rounds` of the seconds per call of `loops` calls in a Python loop, synchronised at
    the end of each round (the GPU work of these shapes is shorter than the host's)."""
    import statistics
    import time

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / loops)
    return statistics.median(times)


def call_costs(loops: int = 300, rounds: int = 3) -> str:
    """torch.mm against gemmtune.torch.mm (and F.linear against gemmtune.torch.linear, and a
    gemmtune.build kernel called directly) per eager call, bf16, x (M, K) and w (N, K) as nn.Linear stores it."""
    import gemmtune
    import gemmtune.torch as gt

    lines = ["| M×N×K | torch.mm µs | gt.mm µs | gt.mm / torch.mm | gt.mm - torch.mm µs | F.linear µs | "
             "gt.linear µs | build() kernel µs |", "|---|" + "---:|" * 7]
    for m, n, k in CALL_SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=BF16)
        w = torch.randn(n, k, device="cuda", dtype=BF16)
        kernel = gemmtune.build(gemmtune.GemmSpec(m, n, k, "nt", "bf16"))
        got = {name: _per_call(fn, loops, rounds) * 1e6 for name, fn in (
            ("mm", lambda: torch.mm(x, w.t())), ("gt", lambda: gt.mm(x, w.t())),
            ("lin", lambda: F.linear(x, w)), ("gtlin", lambda: gt.linear(x, w)), ("build", lambda: kernel(x, w)))}
        lines.append(f"| {m}×{n}×{k} | {got['mm']:.1f} | {got['gt']:.1f} | {got['gt'] / got['mm']:.2f} | "
                     f"{got['gt'] - got['mm']:+.1f} | {got['lin']:.1f} | {got['gtlin']:.1f} | {got['build']:.1f} |")
    return "\n".join(lines)


def grouped_call_costs(loops: int = 300, rounds: int = 3) -> str:
    """Host cost per eager call of a small SwiGLU GroupedLinear (8 experts, 256 -> 128, 64 rows, no grad): the
    torch path, the routed path, gemmtune.torch.grouped_mm and its operator through the dispatcher (all three on
    grouped_calls' plans), torch._grouped_mm alone; the binds made during the timed calls."""
    import gemmtune.torch as gt

    module = GroupedLinear(8, 256, 128, activation="swiglu", device="cuda", dtype=BF16).requires_grad_(False)
    x = torch.randn(64, 256, device="cuda", dtype=BF16)
    offs = torch.arange(1, 9, device="cuda", dtype=torch.int32) * 8
    routed = copy.deepcopy(module)
    routed.use_gemmtune = True
    b = module.weight.transpose(1, 2)
    binds = grouped_plan_stats()["binds"]
    got = {name: _per_call(fn, loops, rounds) * 1e6 for name, fn in (
        ("torch", lambda: module(x, offs)), ("routed", lambda: routed(x, offs)),
        ("gt", lambda: gt.grouped_mm(x, b, offs, activation="swiglu")),
        ("op", lambda: torch.ops.gemmtune.grouped_mm(x, b, offs, None, "swiglu")),
        ("aten", lambda: torch._grouped_mm(x, b, offs=offs)))}
    binds = grouped_plan_stats()["binds"] - binds  # over every call, warm-ups included: a few first binds, no more
    return "\n".join(["| GroupedLinear 8x(256->128) swiglu, 64 rows | torch path µs | routed µs | routed - torch µs | "
                      "gt.grouped_mm µs | gemmtune::grouped_mm op µs | torch._grouped_mm alone µs | binds, all calls |",
                      "|---|" + "---:|" * 7,
                      f"| per eager call | {got['torch']:.1f} | {got['routed']:.1f} | {got['routed'] - got['torch']:+.1f} | "
                      f"{got['gt']:.1f} | {got['op']:.1f} | {got['aten']:.1f} | {binds} |"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=120.0, help="seconds of tuning per block (default 120)")
    parser.add_argument("--blocks", default=",".join(BLOCKS), help=f"comma-separated, of {', '.join(BLOCKS)}")
    parser.add_argument("--out", type=Path, help="write the markdown tables here")
    parser.add_argument("--db", type=Path, help="tuning database (default gemmtune's)")
    parser.add_argument("--samples", type=int, default=50, help="timed forwards per column (default 50)")
    parser.add_argument("--quick", action="store_true", help="budget 0 and 15 samples")
    parser.add_argument("--calls", action="store_true",
                        help="only the host cost per eager call: torch.mm against gemmtune.torch.mm (3 x 300 calls)")
    args = parser.parse_args(argv)
    if args.calls:
        if not torch.cuda.is_available():
            print("bench_blocks: needs a CUDA GPU", file=sys.stderr)
            return 3
        calls = call_costs()
        if torch.cuda.get_device_capability() == (9, 0):
            calls += "\n\n" + grouped_call_costs()
        if args.out is not None:
            args.out.write_text(f"# Host cost per eager call on {torch.cuda.get_device_name()} (bench/bench_blocks.py "
                                f"--calls: 3 rounds of 300 calls, synchronised at the end, median)\n\n{calls}\n")
        print(calls)
        return 0
    names = [n.strip() for n in args.blocks.split(",") if n.strip()]
    unknown = [n for n in names if n not in BLOCKS]
    if unknown or not torch.cuda.is_available():
        print(f"bench_blocks: {'unknown block ' + unknown[0] if unknown else 'needs a CUDA GPU'}", file=sys.stderr)
        return 2 if unknown else 3
    if args.quick:
        args.budget, args.samples = 0.0, 15
    rows = []
    for name in names:
        rows.append(run_block(name, args))
        print(f"### {name}: optimize()'s layers\n\n{rows[-1].report}\n", flush=True)
    summary = table(rows)
    if args.out is not None:
        details = "\n\n".join(f"### {r.block}: optimize()'s layers\n\n{r.report}" for r in rows)
        args.out.write_text(f"# Blocks end to end on {torch.cuda.get_device_name()}, bf16 (bench/bench_blocks.py, "
                            f"budget {args.budget:g} s a block)\n\n{summary}\n\n{details}\n")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
