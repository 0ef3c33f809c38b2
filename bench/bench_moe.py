"""MoE expert GEMMs in one launch (issue 69): gemmtune.torch.grouped_mm against torch._grouped_mm and a loop
of cuBLAS mm over the experts, every case in one run.

    PYTHONPATH=$PWD/src python bench/bench_moe.py --out bench/results/DATE-h200-moe.md     (an sm_90a GPU)
    PYTHONPATH=$PWD/src python bench/bench_moe.py --list                                   (no GPU: the cases)

Cases: three public MoE configs (bench/model_shapes.py: Mixtral-8x7B, 8 experts, 4096 <-> 14336, top-2;
Qwen3-30B-A3B, 128 experts, 2048 <-> 768, top-8; DeepSeek-V3, 256 experts, 7168 <-> 2048, top-8) at 128, 2048
and 16384 tokens, routed balanced (every expert the same share, the remainder one row each) or skewed (Zipf,
exponent 1.2 over a seeded random order of the experts), for both projections of an expert: up
(N = intermediate, K = hidden; gate and up stacked, as SwiGLU experts store them: N doubled) and down (N =
hidden, K = intermediate). bf16, weights stored (G, N, K) as torch.nn.Linear stores each expert.

Timing: each of the three launches captured in its own CUDA graph (torch's loop included: one graph of G
launches; bench_models.graph_replay), then --rounds rounds of the three replays in timing.round_order's
balanced order, CUDA events around each replay,
no L2 flush (the weights of the large cases exceed L2; the small ones stay warm, as in a decode step);
ratios are medians of per-round ratios (peer time / ours). Each of ours is checked against a float64 reference
of up to 256 rows of four groups (max error over the largest |value|; one bf16 rounding is 2^-9 = 2.0e-3 of a
value). --peers adds DeepGEMM's m-grouped contiguous bf16 GEMM (peers/deepgemm_grouped.py: built on the device by
scratch/deepgemm/build.sh; its rows padded to its alignment once, outside the timing; checked the same way), or says
under the table why it did not run.
Up projections are timed again with SwiGLU fused (gemmtune.torch.grouped_mm(..., activation="swiglu"): F = N/2
columns of silu(gate) ⊙ up) against torch._grouped_mm followed by silu(g)·u, each in its CUDA graph.
--bmm: gemmtune.torch.bmm against torch.bmm on issue 69's four batched shapes, the same protocol.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_shapes import DEEPSEEK_V3_EXPERTS, MIXTRAL_EXPERTS, QWEN3_EXPERTS, Experts  # noqa: E402

CONFIGS = (MIXTRAL_EXPERTS, QWEN3_EXPERTS, DEEPSEEK_V3_EXPERTS)
TOKENS = (128, 2048, 16384)
ROUTINGS = ("balanced", "zipf")
PROJECTIONS = ("up", "down")
SEED = 2026  # the Zipf routing of a case is seeded with SEED + experts + rows


@dataclass(frozen=True)
class MoeCase:
    """One grouped GEMM of one MoE layer: rows per expert from the routing, N and K from the projection."""

    config: Experts
    tokens: int
    routing: str
    projection: str

    @property
    def n(self) -> int:
        cfg = self.config
        return 2 * cfg.expert_intermediate if self.projection == "up" else cfg.hidden

    @property
    def k(self) -> int:
        cfg = self.config
        return cfg.hidden if self.projection == "up" else cfg.expert_intermediate

    @property
    def label(self) -> str:
        return f"{self.config.model} {self.tokens} tok {self.routing} {self.projection}"

    def group_rows(self) -> list[int]:
        """Rows each expert gets: tokens × experts_per_token routed balanced or by a seeded Zipf law."""
        return group_rows(self.config.experts, self.tokens * self.config.experts_per_token, self.routing)


def group_rows(experts: int, rows: int, routing: str) -> list[int]:
    """`rows` spread over `experts` by the package's routing (gemmtune.grouped.distribution.routed_rows: evenly, or
    Zipf with exponent 1.2 over a seeded permutation of the experts), seeded per case with SEED + experts + rows
    as this bench always was, so its cases keep the rows of the tables already published."""
    from gemmtune.grouped.distribution import routed_rows

    return list(routed_rows(experts, rows, routing, SEED + experts + rows))


def cases() -> list[MoeCase]:
    return [MoeCase(cfg, tokens, routing, projection) for cfg in CONFIGS for tokens in TOKENS
            for routing in ROUTINGS for projection in PROJECTIONS]


def list_text(selected: list[MoeCase]) -> str:
    lines = []
    for case in selected:
        rows = case.group_rows()
        lines.append(f"{case.label:44s} G={len(rows):3d} rows={sum(rows):6d} N×K={case.n}×{case.k} "
                     f"busiest {max(rows)} empty {rows.count(0)}")
    return "\n".join(lines)


# --- on the GPU ----------------------------------------------------------------------------------------
PEERS = ("grouped_mm", "loop", "deepgemm")  # --peers: torch._grouped_mm and the loop always run (issue 69's bars)


def parse_peers(text: str) -> list[str]:
    """--peers: names from PEERS ('grouped' for grouped_mm), in PEERS' order; a ValueError names an unknown one."""
    names = {"grouped_mm" if n == "grouped" else n for n in (w.strip().lower() for w in text.split(",")) if n}
    unknown = sorted(names - set(PEERS))
    if unknown:
        raise ValueError(f"unknown peer {', '.join(unknown)} (known: {', '.join(PEERS)})")
    return [p for p in PEERS if p in names | {"grouped_mm", "loop"}]


def measure(case: MoeCase, rounds: int, peers: tuple[str, ...] = ("grouped_mm", "loop")) -> dict:
    """Ours, torch._grouped_mm, the loop of mm and the other `peers` (available ones) for `case`: medians (µs),
    per-round ratios, the errors."""
    import torch

    import gemmtune.torch as gt
    from bench_models import graph_times

    rows = case.group_rows()
    x = torch.randn(sum(rows), case.k, device="cuda", dtype=torch.bfloat16)
    weights = torch.randn(len(rows), case.n, case.k, device="cuda", dtype=torch.bfloat16) / case.k ** 0.5
    b = weights.transpose(1, 2)
    offs = torch.tensor(rows, device="cuda").cumsum(0).to(torch.int32)
    ends = offs.tolist()
    pieces = [(x[s:e], b[g]) for g, (s, e) in enumerate(zip([0] + ends[:-1], ends)) if e > s]
    ours = gt.grouped_mm(x, b, offs)
    error = _sampled_error(torch, ours, x, weights, ends)
    calls = {"ours": lambda: gt.grouped_mm(x, b, offs), "grouped_mm": lambda: torch._grouped_mm(x, b, offs=offs),
             "loop": lambda: [torch.mm(p, w) for p, w in pieces]}
    errors, failed = {}, None
    if "deepgemm" in peers:  # padded once here, outside the timing; FLOPs below count the real rows
        from peers import deepgemm_grouped

        try:  # its first call JIT-compiles: a refusal is said under the table, the others go on
            prepared = deepgemm_grouped.prepare(x, weights, rows)
            errors["deepgemm"] = _sampled_error(torch, prepared.real_rows(prepared.run()), x, weights, ends)
            calls["deepgemm"] = prepared.run
        except Exception as exc:
            failed = f"failed on {case.label}: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}"
    swiglu_error = None
    if case.projection == "up":  # gate and up stacked: SwiGLU fused, against torch's grouped GEMM then silu(g)·u
        half = case.n // 2
        calls["swiglu"] = lambda: gt.grouped_mm(x, b, offs, activation="swiglu")
        calls["torch_swiglu"] = lambda: _swiglu(torch, torch._grouped_mm(x, b, offs=offs), half)
        swiglu_error = _sampled_error(torch, calls["swiglu"](), x, weights, ends, post=lambda y: _swiglu(torch, y, half))
    times = graph_times(torch, calls, rounds)
    ratio = {peer: statistics.median(p / o for p, o in zip(times[peer], times["ours"]))
             for peer in ("grouped_mm", "loop", "deepgemm") if peer in times}
    if "swiglu" in times:
        ratio["swiglu"] = statistics.median(p / o for p, o in zip(times["torch_swiglu"], times["swiglu"]))
    flops = 2 * sum(rows) * case.n * case.k
    return {"case": case.label, "experts": len(rows), "rows": sum(rows), "n": case.n, "k": case.k,
            "rows_per_active": sum(rows) / max(1, sum(r > 0 for r in rows)), "error": error, "swiglu_error": swiglu_error,
            "peer_errors": errors, "peer_failed": failed,
            "us": {name: statistics.median(t) for name, t in times.items()},
            "tflops": flops / statistics.median(times["ours"]) / 1e6, "ratio": ratio}


def _swiglu(torch, y, half: int):
    """silu(gate) · up of a product whose first `half` columns are the gate's and the rest up's."""
    return torch.nn.functional.silu(y[:, :half]) * y[:, half:]


def _sampled_error(torch, ours, x, weights, ends: list[int], groups: int = 4, rows: int = 256, post=None) -> float:
    """Max |ours - float64 reference| over the largest |reference|, on up to `rows` rows of each of `groups`
    non-empty groups spread over the experts (the whole float64 product would not fit the GPU's memory);
    `post` maps the reference product to what `ours` holds (SwiGLU)."""
    starts = [0] + ends[:-1]
    busy = [g for g, (s, e) in enumerate(zip(starts, ends)) if e > s]
    picked = busy[:: max(1, len(busy) // groups)][:groups]
    worst, scale = 0.0, 0.0
    for g in picked:
        s, e = starts[g], min(ends[g], starts[g] + rows)
        want = x[s:e].double() @ weights[g].double().t()
        want = post(want) if post else want
        worst = max(worst, float((ours[s:e].double() - want).abs().max()))
        scale = max(scale, float(want.abs().max()))
    return worst / max(scale, 1e-30)


# Issue 69's batched shapes (batch, M, N, K): attention scores, a large batch, many small ones, an odd one.
BMM_SHAPES = ((32, 512, 512, 64), (8, 2048, 4096, 4096), (64, 128, 128, 128), (12, 333, 200, 72))


def measure_bmm(shape: tuple[int, int, int, int], rounds: int) -> dict:
    """gemmtune.torch.bmm against torch.bmm: b a transposed view of (B, N, K) storage, as k in q·kᵀ."""
    import torch

    import gemmtune.torch as gt
    from bench_models import graph_times

    batch, m, n, k = shape
    a = torch.randn(batch, m, k, device="cuda", dtype=torch.bfloat16)
    b = (torch.randn(batch, n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5).transpose(1, 2)
    want = a.double() @ b.double()
    error = float((gt.bmm(a, b).double() - want).abs().max() / want.abs().max())
    times = graph_times(torch, {"ours": lambda: gt.bmm(a, b), "bmm": lambda: torch.bmm(a, b)}, rounds)
    ratio = statistics.median(p / o for p, o in zip(times["bmm"], times["ours"]))
    return {"shape": "x".join(map(str, shape)), "us": {name: statistics.median(t) for name, t in times.items()},
            "ratio": ratio, "error": error}


def bmm_table(rows: list[dict]) -> str:
    lines = ["| batch×M×N×K | ours µs | torch.bmm µs | × torch.bmm | error vs float64 |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['shape']} | {r['us']['ours']:.1f} | {r['us']['bmm']:.1f} | {r['ratio']:.2f} | {r['error']:.1e} |"
              for r in rows]
    return "\n".join(lines + ["", f"Issue 69's bmm bar (≥ 1.00× torch.bmm on each): lowest {min(r['ratio'] for r in rows):.3f}"])


def _geomean(values: list[float]) -> float:
    import math

    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def table_text(rows: list[dict], skipped: dict[str, str] | None = None) -> str:
    """The table; `skipped`: peer -> why it did not run (said above the table and under it)."""
    dg = [r["ratio"]["deepgemm"] for r in rows if "deepgemm" in r["ratio"]]
    extra = (" DeepGEMM µs | × DeepGEMM | DeepGEMM error |", "---:|---:|---:|") if dg else ("", "")
    lines = [f"Not run: {name}: {why}" for name, why in (skipped or {}).items()]
    lines += [""] if lines else []
    lines += ["| case | G | rows | N×K | ours µs (TFLOP/s) | torch._grouped_mm µs | loop µs | × grouped_mm | × loop | "
              f"error vs float64 |{extra[0]}", f"|---|---:|---:|---|---:|---:|---:|---:|---:|---:|{extra[1]}"]
    for r in rows:
        cells = "" if not dg else " — | — | — |" if "deepgemm" not in r["ratio"] else (
            f" {r['us']['deepgemm']:.1f} | {r['ratio']['deepgemm']:.2f} | {r['peer_errors']['deepgemm']:.1e} |")
        lines.append(f"| {r['case']} | {r['experts']} | {r['rows']} | {r['n']}×{r['k']} | {r['us']['ours']:.1f} "
                     f"({r['tflops']:.0f}) | {r['us']['grouped_mm']:.1f} | {r['us']['loop']:.1f} | "
                     f"{r['ratio']['grouped_mm']:.2f} | {r['ratio']['loop']:.2f} | {r['error']:.1e} |{cells}")
    fused = [r for r in rows if "swiglu" in r["ratio"]]
    if fused:
        lines += ["", "Up projections with SwiGLU fused (D = silu(x·Wgᵀ) ⊙ (x·Wuᵀ), F = N/2 columns) against torch._grouped_mm then "
                  "silu(g)·u, both in CUDA graphs:", "",
                  "| case | ours fused µs | torch µs | × torch | error vs float64 |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {r['case']} | {r['us']['swiglu']:.1f} | {r['us']['torch_swiglu']:.1f} | {r['ratio']['swiglu']:.2f} | "
                  f"{r['swiglu_error']:.1e} |" for r in fused]
        lines += [f"", f"SwiGLU fused × torch: geomean {_geomean([r['ratio']['swiglu'] for r in fused]):.3f}, "
                  f"lowest {min(r['ratio']['swiglu'] for r in fused):.3f}"]
    vs_torch = [r["ratio"]["grouped_mm"] for r in rows]
    few = [r["ratio"]["grouped_mm"] for r in rows if r["rows_per_active"] <= 64]
    vs_loop = [r["ratio"]["loop"] for r in rows]
    lines += ["", "Issue 69's bars:",
              f"- × torch._grouped_mm: geomean {_geomean(vs_torch):.3f} (≥ 1.15), lowest {min(vs_torch):.3f} (≥ 1.00)",
              f"- × torch._grouped_mm where experts average ≤ 64 rows: geomean {_geomean(few):.3f} (≥ 1.30, "
              f"{len(few)} cases)",
              f"- × a loop of cuBLAS: lowest {min(vs_loop):.3f} (≥ 1.30 everywhere)",
              (f"- × DeepGEMM (its rows padded to its alignment, FLOPs on the real rows): geomean {_geomean(dg):.3f}, "
               f"lowest {min(dg):.3f} ({len(dg)} cases)" if dg else
               f"- DeepGEMM: not run ({(skipped or {}).get('deepgemm', 'not asked for: --peers ...,deepgemm')})")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the cases and their routing (no GPU)")
    parser.add_argument("--models", help="only configs whose name contains one of these, e.g. mixtral,qwen")
    parser.add_argument("--rounds", type=int, default=30, help="paired rounds per case (default 30)")
    parser.add_argument("--out", type=Path, help="write the markdown table here (rewritten after every case)")
    parser.add_argument("--bmm", action="store_true", help="also time gemmtune.torch.bmm against torch.bmm")
    parser.add_argument("--peers", default="grouped_mm,loop",
                        help=f"peers to time, of {','.join(PEERS)} (grouped_mm and loop always run); e.g. grouped,loop,deepgemm")
    args = parser.parse_args(argv)
    try:
        peers = parse_peers(args.peers)
    except ValueError as exc:
        print(f"bench_moe: --peers: {exc}", file=sys.stderr)
        return 2
    wanted = [w.strip().lower() for w in (args.models or "").split(",") if w.strip()]
    selected = [c for c in cases() if not wanted or any(w in c.config.model.lower() for w in wanted)]
    if args.list or not selected:
        print(list_text(selected) if selected else "no case matches --models", file=sys.stdout if selected else sys.stderr)
        return 0 if selected else 2
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("bench_moe: needs an sm_90a GPU (H100/H200): the grouped kernel is wgmma + TMA", file=sys.stderr)
        return 3
    skipped = {}
    if "deepgemm" in peers:
        from peers import deepgemm_grouped

        reason = deepgemm_grouped.available()
        if reason:
            skipped["deepgemm"] = reason
            peers.remove("deepgemm")
            print(f"bench_moe: {reason}", file=sys.stderr)
    rows = []
    for index, case in enumerate(selected):
        rows.append(measure(case, args.rounds, tuple(peers)))
        r = rows[-1]
        if r["peer_failed"]:
            skipped["deepgemm"] = r["peer_failed"]
            peers.remove("deepgemm")
            print(f"bench_moe: DeepGEMM {r['peer_failed']}", file=sys.stderr)
        print(f"[{index + 1}/{len(selected)}] {case.label}: ours {r['us']['ours']:.1f} µs, "
              + ", ".join(f"x{x:.2f} {name}" for name, x in r["ratio"].items()), flush=True)
        if args.out:
            args.out.write_text(f"# MoE grouped GEMMs on {torch.cuda.get_device_name()}, bf16 (bench/bench_moe.py)\n\n"
                                f"{table_text(rows, skipped)}\n")
    text = table_text(rows, skipped)
    if args.bmm:
        text += "\n\n## bmm\n\n" + bmm_table([measure_bmm(shape, args.rounds) for shape in BMM_SHAPES])
        if args.out:
            args.out.write_text(f"# MoE grouped GEMMs on {torch.cuda.get_device_name()}, bf16 (bench/bench_moe.py)\n\n{text}\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
