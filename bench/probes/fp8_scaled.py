"""fp8 on the grouped wgmma kernel against torch's fp8 GEMMs (issue 70), first numbers: gemmtune.torch.scaled_mm
against torch._scaled_mm (per tensor and rowwise, e4m3, bf16 out; block scales against torch's per-tensor call, as
this torch has no blockwise scaled mm on sm_90) and scaled_grouped_mm against
torch._scaled_grouped_mm (rowwise), each checked against torch's result, then timed in CUDA graphs, rounds in a
balanced order, medians (no L2 flush). Every config of the grouped kernel's candidates is timed, the default marked;
a config's label names its tile, stages, consumers, ping-pong, staged rows, cluster and fp8 promotion (`pr4`: wgmma's
sums added into fp32 every 4 k-blocks; `pr0`: never). A second table gives, per per-tensor/rowwise shape, the
promoted default against its tile unpromoted (what promotion costs) and the fastest of each kind against torch. A third
gives, per shape and scaling, the default against its twins: unpromoted (`pr0`), promote_overlap (`ov`: the next
k-block's or chunk's wgmma issued before the one before is promoted, pairs ending in wgmma_wait<0>; for block scales,
whose default overlaps, the waiting twin) and overlap_static (`ovs`: both sums buffers named statically, a wgmma in
flight across every boundary), and torch (its blockwise _scaled_mm for block scales). `--quick`: four shapes, the
default, its twins and torch only, no grouped shapes (about 2 minutes on an H200).

    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/fp8_scaled.py --out /tmp/fp8.md
    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/fp8_scaled.py --quick --out /tmp/fp8.md
    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/fp8_scaled.py --variants --rounds 8 --out /tmp/fp8v.md  # ~6 min
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (M, N, K): squares and prefill shapes of public configs (Llama-3-8B 4096 tokens: MLP up, down, fused QKV;
# Qwen2.5-7B: MLP up, down; Mistral-7B-like o_proj at 8192 tokens).
PLAIN = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 4096, 14336), (4096, 6144, 4096),
         (4096, 18944, 3584), (4096, 3584, 18944), (8192, 4096, 4096))
GROUPED = ((8, 1024, 14336, 4096), (64, 512, 2816, 2048), (128, 64, 1536, 2048))  # (G, rows each, N, K), balanced
QUICK = ((4096, 4096, 4096), (4096, 14336, 4096), (4096, 4096, 14336), (8192, 4096, 4096))


def _time(torch, calls: dict, rounds: int) -> dict[str, float]:
    from bench_models import graph_times

    return {name: statistics.median(t) for name, t in graph_times(torch, calls, rounds).items()}


def _close(torch, got, want) -> float:
    return float((got.float() - want.float()).abs().max() / want.float().abs().max())


def label(config, default) -> str:
    """A config's row name: every field that differs between candidates (promotion for fp8 tensor/rowwise)."""
    return (f"{config.bm}x{config.bn} s{config.stages} c{config.consumers}{' pp' if config.pingpong else ''}"
            f"{' st' if config.staged_store else ''}{f' cl{config.cluster}' if config.cluster > 1 else ''}"
            f" pr{config.promote_every}{(' ovs' if config.overlap_static else ' ov') if config.promote_overlap else ''}"
            f"{' (default)' if config == default else ''}")


def promotion_cost(m: int, n: int, k: int, scaling: str, us: dict[str, float]) -> str:
    """The promotion table's row: the default (promoted) against its tile unpromoted, and the fastest promoted and
    unpromoted configs against torch."""
    default = next((name for name in us if name.endswith("(default)")), None)
    if default is None:  # its result differed from torch's: not timed (the main table shows its error)
        return f"| {m}x{n}x{k} | {scaling} | default not timed | | | | | |"
    twin = default.replace(" (default)", "").rsplit(" pr", 1)[0] + " pr0"
    promoted = min((t for name, t in us.items() if " pr" in name and " pr0" not in name), default=float("nan"))
    unpromoted = min((t for name, t in us.items() if name.endswith(" pr0")), default=float("nan"))
    base = us["torch"]
    return (f"| {m}x{n}x{k} | {scaling} | {default} | {us[default]:.1f} | {us.get(twin, float('nan')):.1f} | "
            f"{us.get(twin, float('nan')) / us[default]:.2f} | {base / promoted:.2f} | {base / unpromoted:.2f} |")


def overlap_row(m: int, n: int, k: int, scaling: str, us: dict[str, float], names: dict[str, str]) -> str:
    """The overlap table's row: the default and its twins (µs; nan where not timed: not valid, or its result
    differed) against torch (for block scales its blockwise form where this torch has one)."""
    base = us.get("torch block", us["torch"]) if scaling == "block" else us["torch"]
    nan = float("nan")
    times = {role: us.get(names[role], nan) if role in names else nan for role in ("default", "pr0", "ov", "ovs")}
    return (f"| {m}x{n}x{k} | {scaling} | {names['default']} | "
            + " | ".join(f"{times[role]:.1f}" for role in times) + f" | {base:.1f} | "
            + " | ".join(f"{base / times[role]:.2f}" for role in times) + " |")


def twins(spec) -> dict[str, object]:
    """The default's A/B twins by role: unpromoted (pr0, tensor/rowwise), the promote_overlap loop of pairs ending
    in wgmma_wait<0> (ov; for block scales, where the default overlaps, its waiting twin), and overlap_static (ovs:
    both buffers named statically, a wgmma in flight across every boundary), each where valid for `spec`."""
    from gemmtune.grouped.config import default_config, rejections

    default = default_config(spec)
    found = {"pr0": default.with_(promote_every=0, promote_overlap=False),
             "ov": default.with_(promote_overlap=not default.promote_overlap),
             "ovs": default.with_(promote_overlap=True, overlap_static=True)}
    if spec.scaling == "block":
        del found["pr0"]
    return {role: config for role, config in found.items() if config != default and not rejections(config, spec)}


def variants(spec) -> dict[str, object]:
    """--variants: the default beside its neighbours, each where valid. Tensor/rowwise (default since 2026-12-07:
    promoted every 8 k-blocks in bands of 8 tile rows): every 4, clusters of 2 sharing A with and without bands
    (clusters alone led bands on two of four shapes per tensor in the 2026-12-07 run), and the speed unpromoted
    tiles reach (128x128, its ping-pong, 128x256). Block scales (untimed with bands or clusters): bands of 8,
    clusters of 2, both, and the waiting loop in bands."""
    from gemmtune.grouped.config import _deepest, default_config, rejections

    d = default_config(spec)
    if spec.scaling == "block":
        found = {"default": d, "band8": d.with_(band_m=8), "cl2": d.with_(cluster=2),
                 "band8 cl2": d.with_(band_m=8, cluster=2), "band8 wait": d.with_(band_m=8, promote_overlap=False)}
    else:
        plain = dict(promote_every=0, promote_overlap=False, overlap_static=False)
        found = {"default": d, "pr4": d.with_(promote_every=4), "cl2 no bands": d.with_(band_m=0, cluster=2),
                 "cl2": d.with_(cluster=2), "pr0 128x128": d.with_(**plain),
                 "pr0 pp 128x128": d.with_(pingpong=True, **plain), "pr0 128x256": d.with_(bn=256, **plain)}
    return {name: _deepest(c, spec) for name, c in found.items() if not rejections(_deepest(c, spec), spec)}


def variant_rows(torch, m: int, n: int, k: int, scaling: str, rounds: int) -> list[str]:
    """--variants' rows for one shape and scaling: each variant against torch (its blockwise _scaled_mm for block
    scales, where this torch has one; else its per-tensor call on the same product) and its fast-accum form."""
    from gemmtune.grouped.spec import GroupedSpec

    a, w, sa, sb, peer_a, peer_b, offs = _operands(torch, m, n, k, scaling)
    calls = {"torch": lambda: torch._scaled_mm(a, w.t(), peer_a, peer_b, out_dtype=torch.bfloat16),
             "torch fast accum": lambda: torch._scaled_mm(a, w.t(), peer_a, peer_b, out_dtype=torch.bfloat16,
                                                          use_fast_accum=True)}
    want = calls["torch"]()
    if scaling == "block":
        calls.update(_torch_blockwise(torch, a, w, sa, sb, m, n, k))
    spec = GroupedSpec(1, m, n, k, "e4m3", scaling=scaling)
    errors = _add_ours(torch, spec, variants(spec), (a, w, sa, sb, offs), want, calls)
    us = _time(torch, calls, rounds)
    base = us.get("torch block", us["torch"])
    return [f"| {m}x{n}x{k} | {scaling} | {name} | {t:.1f} | {2 * m * n * k / t / 1e6:.0f} | {base / t:.3f} | "
            f"{us['torch fast accum'] / t:.3f} | {errors.get(name, 0):.1e} |" for name, t in sorted(us.items(), key=lambda kv: kv[1])]


def _torch_blockwise(torch, a, w, sa, sb, m: int, n: int, k: int) -> dict:
    """{"torch block": call} where this torch and GPU run a blockwise _scaled_mm (A's scales in either layout it
    takes), else {} (what it refused is printed)."""
    for layout, (ta, tb) in {"column-major a": (sa.t().contiguous().t(), sb.t()), "row-major a": (sa, sb.t())}.items():
        try:
            torch._scaled_mm(a, w.t(), ta, tb, out_dtype=torch.bfloat16)
            torch.cuda.synchronize()
            return {"torch block": lambda ta=ta, tb=tb: torch._scaled_mm(a, w.t(), ta, tb, out_dtype=torch.bfloat16)}
        except Exception as err:  # noqa: BLE001 - the probe reports what torch refuses
            print(f"probe: torch block ({layout}) at {m}x{n}x{k}: {type(err).__name__}: {str(err).splitlines()[0][:160]}",
                  flush=True)
    return {}


def _operands(torch, m: int, n: int, k: int, scaling: str) -> tuple:
    """(a, w, scale_a, scale_b, torch's scale_a, torch's scale_b, offs): random e4m3 A (m, k) and W (n, k), the
    kernel's scales (block: all ones, so torch's per-tensor call with ones is the same product) and one group."""
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones(1, 1, device="cuda")
    if scaling == "block":  # scales of one: the same product as torch's per-tensor call with ones (the time is the point)
        sa, sb = torch.ones(m, -(-k // 128), device="cuda"), torch.ones(-(-n // 128), -(-k // 128), device="cuda")
    else:
        sa, sb = ((one, one) if scaling == "tensor" else
                  (torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5))
    peer_a, peer_b = (one, one) if scaling == "block" else (sa, sb)
    return a, w, sa, sb, peer_a, peer_b, torch.tensor([m], device="cuda", dtype=torch.int32)


def _add_ours(torch, spec, configs: dict, operands: tuple, want, calls: dict) -> dict[str, float]:
    """Each named config of `spec` built and run once over a NaN-filled D: its max error against `want` (by
    name, returned), and into `calls` where under 2e-2 (else left untimed: its error shows).
    operands: (a, w, scale_a, scale_b, offs)."""
    from gemmtune.grouped.launch import build

    a, w, sa, sb, offs = operands
    errors = {}
    for name, config in configs.items():
        out, kernel = torch.full((spec.total_m, spec.n), float("nan"), device="cuda", dtype=torch.bfloat16), build(spec, config)

        def call(kernel=kernel, out=out):
            kernel(a.data_ptr(), w.data_ptr(), offs.data_ptr(), out.data_ptr(), None, torch.cuda.current_stream().cuda_stream,
                   scale_a=sa.data_ptr(), scale_b=sb.data_ptr())
            return out
        errors[name] = _close(torch, call(), want)
        if errors[name] < 2e-2:
            calls[name] = call
    return errors


def configs_timed(spec, quick: bool) -> list:
    """The default (and, unless quick, the other candidates for tensor/rowwise), then its twins (pr0, ov, ovs)."""
    from gemmtune.grouped.config import candidates, default_config

    default = default_config(spec)
    configs = [default] if quick or spec.scaling == "block" else candidates(spec)
    return configs + [twin for twin in twins(spec).values() if twin not in configs]


def plain(torch, m: int, n: int, k: int, scaling: str, rounds: int, quick: bool = False) -> tuple[list[str], str, str]:
    from gemmtune.grouped.config import default_config
    from gemmtune.grouped.spec import GroupedSpec

    a, w, sa, sb, peer_a, peer_b, offs = _operands(torch, m, n, k, scaling)
    spec = GroupedSpec(1, m, n, k, "e4m3", scaling=scaling)
    calls = {"torch": lambda: torch._scaled_mm(a, w.t(), peer_a, peer_b, out_dtype=torch.bfloat16)}
    want = calls["torch"]()
    errors = {}
    if scaling == "block":  # torch's own blockwise scaled mm, where this torch and GPU have one
        calls.update(_torch_blockwise(torch, a, w, sa, sb, m, n, k))
        if "torch block" in calls:
            errors["torch block"] = _close(torch, calls["torch block"](), want)
    default = default_config(spec)
    errors.update(_add_ours(torch, spec, {label(c, default): c for c in configs_timed(spec, quick)},
                            (a, w, sa, sb, offs), want, calls))
    us = _time(torch, calls, rounds)
    flops = 2 * m * n * k
    rows = [f"| {m}x{n}x{k} | {scaling} | {name} | {t:.1f} | {flops / t / 1e6:.0f} | {us['torch'] / t:.2f} | "
            f"{errors.get(name, 0):.1e} |" for name, t in sorted(us.items(), key=lambda kv: kv[1])]
    names = {"default": label(default, default), **{role: label(c, default) for role, c in twins(spec).items()}}
    cost = promotion_cost(m, n, k, scaling, us) if scaling != "block" and not quick else ""
    return rows, cost, overlap_row(m, n, k, scaling, us, names)


def grouped(torch, groups: int, rows: int, n: int, k: int, rounds: int) -> list[str]:
    import gemmtune.torch as gt

    total = groups * rows
    a = torch.randn(total, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(groups, n, k, device="cuda").to(torch.float8_e4m3fn)
    sa, sb = torch.rand(total, device="cuda") + 0.5, torch.rand(groups, n, device="cuda") + 0.5
    offs = (torch.arange(1, groups + 1, device="cuda") * rows).to(torch.int32)
    calls = {"ours (default)": lambda: gt.scaled_grouped_mm(a, w.transpose(1, 2), sa, sb, offs)}
    error = None
    if hasattr(torch, "_scaled_grouped_mm"):
        calls["torch"] = lambda: torch._scaled_grouped_mm(a, w.transpose(1, 2), sa, sb, offs=offs, out_dtype=torch.bfloat16)
        error = _close(torch, calls["ours (default)"](), calls["torch"]())
    us = _time(torch, calls, rounds)
    base = us.get("torch")
    flops = 2 * total * n * k
    return [f"| G={groups} x {rows} rows, {n}x{k} | rowwise | {name} | {t:.1f} | {flops / t / 1e6:.0f} | "
            f"{(base / t) if base else float('nan'):.2f} | {error if error is not None else float('nan'):.1e} |"
            for name, t in sorted(us.items(), key=lambda kv: kv[1])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="4 shapes; default, its pr0/ov/ovs twins and torch; no grouped")
    parser.add_argument("--variants", action="store_true", help="the quick shapes at every scaling: the default against "
                        "its neighbours (variants()), and torch with and without fast accumulation")
    args = parser.parse_args()
    import torch

    if args.variants:
        lines = ["| shape | scaling | kernel | µs | TFLOP/s | × torch (block: its blockwise) | × torch fast accum | max error vs torch |",
                 "|---|---|---|---:|---:|---:|---:|---:|"]
        for (m, n, k), scaling in [(shape, s) for shape in QUICK for s in ("tensor", "rowwise", "block")]:
            lines += variant_rows(torch, m, n, k, scaling, args.rounds)
            print("\n".join(lines), flush=True)
            if args.out:
                args.out.write_text("\n".join(lines) + "\n")
        return 0

    rounds = min(args.rounds, 6) if args.quick else args.rounds
    lines = ["| shape | scaling | kernel | µs | TFLOP/s | × torch | max error vs torch |", "|---|---|---|---:|---:|---:|---:|"]
    costs = ["", "Promotion: the default (promoted) against its tile unpromoted (pr0), and the fastest of each against torch.", "",
             "| shape | scaling | default | µs | pr0 twin µs | pr0 twin / default | × torch (fastest promoted) | "
             "× torch (fastest pr0) |", "|---|---|---|---:|---:|---:|---:|---:|"]
    overlaps = ["", "The default (tensor/rowwise: pr4) against its twins: unpromoted (pr0), promote_overlap's loop of pairs "
                "(ov; block scales: the default overlaps, ov is its waiting twin) and overlap_static (ovs), all against "
                "torch (block: its blockwise _scaled_mm).", "",
                "| shape | scaling | default | default µs | pr0 µs | ov µs | ovs µs | torch µs | × torch (default) | "
                "× torch (pr0) | × torch (ov) | × torch (ovs) |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def write() -> None:
        if args.out:
            args.out.write_text("\n".join(lines + overlaps + (costs if len(costs) > 5 else [])) + "\n")
    for m, n, k in (QUICK if args.quick else PLAIN):
        for scaling in ("tensor", "rowwise", "block"):
            rows, cost, overlap = plain(torch, m, n, k, scaling, rounds, args.quick)
            lines += rows
            overlaps.append(overlap)
            print(overlap, flush=True)
            if cost:
                costs.append(cost)
                print(cost, flush=True)
            write()
    for shape in () if args.quick else GROUPED:
        lines += grouped(torch, *shape, rounds)
        print("\n".join(lines[-2:]), flush=True)
        write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
