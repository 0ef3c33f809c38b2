"""Probe (issue 67, "the epilogue's own cost"): what a fused epilogue adds to our GEMM, against
cuBLAS's GEMM alone and torch eager, at the issue's three shapes, in one run.

    PYTHONPATH=$PWD/src python bench/probes/epilogue_cost.py [--rounds 60] [--dtypes bf16,fp16] [--out table.md]

Per shape and dtype (layout nt, as nn.Linear stores W), one set of paired rounds (bench_models'
protocol: L2 flushed before every launch, balanced order, torch replayed from CUDA graphs, ours
checked against a float64 reference with D poisoned before timing):
  cuBLAS          torch.mm(x, Wᵀ) alone: the bar a fused kernel must clear
  ours plain      gemmtune.build(spec) untuned (an empty tuning database), no epilogue
  ours +bias, +bias+ReLU, +bias+GELU    the same, fused (bias_col, bias_col+relu, bias_col+gelu)
  eager addmm     F.linear(x, W, bias)
  eager +ReLU, eager +GELU              F.linear then F.relu / F.gelu(approximate="tanh")
The table gives the median µs of each and the chooser's prediction for ours (with its epilogue term).
Before this change (H200, 2026-11-28, the issue's table, bf16): 6304x3072x768 cuBLAS 47.7, plain
47.6, +bias 59.0, +bias+ReLU 60.4, +bias+GELU 87.5, eager addmm+GELU 76.0 µs.

GPU time: about 40 s of start-up and builds, then about 2 s per shape and dtype (6 cases: ~1 minute).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_models as bm  # noqa: E402

SHAPES = ((6304, 3072, 768), (6304, 768, 3072), (4096, 4096, 1024))
FUSED = {"ours +bias": "bias_col", "ours +bias+ReLU": "bias_col+relu", "ours +bias+GELU": "bias_col+gelu"}
EAGER = {"eager addmm": "bias_col", "eager +ReLU": "bias_col+relu", "eager +GELU": "bias_col+gelu"}
COLUMNS = ("cuBLAS", "ours plain", *FUSED, *EAGER)


def specs(m: int, n: int, k: int, dtype: str) -> dict:
    from gemmtune.spec import GemmSpec

    return {"ours plain": GemmSpec(m, n, k, "nt", dtype),
            **{name: GemmSpec(m, n, k, "nt", dtype, epilogue) for name, epilogue in FUSED.items()}}


def launches_of(shape: tuple[int, int, int], dtype: str, built: dict, seed: int) -> bm.Launches:
    """Every launch of one shape and dtype, each checked once (ours: poisoned D, float64 reference)."""
    import torch

    from gemmtune.epilogue import Epilogue

    ours = specs(*shape, dtype)
    operands = bm.make_operands(torch, ours["ours +bias"], seed)
    product = bm.product64(operands)
    launches = bm.Launches()
    gemm_out = torch.empty(shape[:2], dtype=operands.x.dtype, device=bm.DEVICE)
    w_t = operands.w.t()
    bm.add_peer(launches, torch, "cuBLAS", lambda: torch.mm(operands.x, w_t, out=gemm_out), ours["ours plain"], product, 1)
    for name, spec in ours.items():
        expected = bm.epilogue64(torch, spec.epilogue, product, operands.named())
        bm.add_ours(launches, torch, name, built[spec], operands, expected)
    for name, chain in EAGER.items():
        epilogue = Epilogue.parse(chain)
        function = bm.model_function(torch, epilogue)  # F.linear, then the activation
        expected = bm.epilogue64(torch, epilogue, product, operands.named())
        bm.add_peer(launches, torch, name, lambda f=function: f(operands.x, operands.w, operands.bias, None),
                    ours["ours +bias"], expected, 1 + len(epilogue.ops))
    return launches


def predicted_us(spec) -> str:
    from gemmtune.chooser import choose

    pick = choose(spec, "sm_90a")
    extra = f" (epilogue {pick.epilogue.seconds * 1e6:.1f})" if pick.epilogue is not None else ""
    return f"{pick.predicted_s * 1e6:.1f}{extra}"


def row(shape: tuple[int, int, int], dtype: str, built: dict, rounds: int) -> list[str]:
    from gemmtune.device import query_device
    from gemmtune.timing import TimingProtocol, measure_alternating

    launches = launches_of(shape, dtype, built, seed=67)
    try:
        times = measure_alternating(launches.calls, rounds, query_device().l2_bytes, TimingProtocol(warmup=3))
    finally:
        launches.unload()
    cells = [f"{statistics.median(times[c]) * 1e6:.1f}" if c in times else "—" for c in COLUMNS]
    bad = [f"{name}: {text}" for name, text in launches.checks.items() if text != "ok"]
    picks = "; ".join(f"{name} {predicted_us(spec)}" for name, spec in specs(*shape, dtype).items())
    label = f"{shape[0]}x{shape[1]}x{shape[2]} {dtype}"
    print(f"{label}: predicted µs {picks}" + (f"; CHECKS: {bad}" if bad else ""), flush=True)
    return [label, *cells]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60, help="paired rounds per shape (default 60)")
    parser.add_argument("--dtypes", default="bf16", help="bf16, fp16 or both (default bf16)")
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    args = parser.parse_args(argv)
    from concurrent.futures import ThreadPoolExecutor

    from gemmtune.device import query_device

    query_device()  # once, before the threads (build_one's present_device reads it)
    db_path = Path(tempfile.mkdtemp()) / "empty.sqlite"  # untuned, as a new user
    wanted = [spec for shape in SHAPES for dtype in args.dtypes.split(",") for spec in specs(*shape, dtype).values()]
    with ThreadPoolExecutor(16) as pool:
        built = dict(zip(wanted, pool.map(lambda spec: bm.build_one(spec, db_path), wanted)))
    for spec, b in built.items():
        print(f"{spec.short()}: {b.describe}", flush=True)
    lines = ["| shape | " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
    for shape in SHAPES:
        for dtype in args.dtypes.split(","):
            lines.append("| " + " | ".join(row(shape, dtype, built, args.rounds)) + " |")
    table = "\n".join(["median µs, L2 flushed, paired rounds (bench/probes/epilogue_cost.py)", "", *lines])
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
