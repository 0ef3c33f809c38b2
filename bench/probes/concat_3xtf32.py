"""Probe: 3xTF32 as one tf32 GEMM with K tripled, the split done by a pre-pass (no kernel change).

    A·B ≈ A_big·B_big + A_big·B_small + A_small·B_big = [A_big | A_big | A_small] · [B_big ; B_small ; B_big]

with big = x rounded to tf32 (nearest, ties away: what cvt.rna gives) and small = x − big (exact in
fp32). A pre-pass writes A' (M×3K) and B' (N×3K, both K-major), and the wgmma family's own tf32 nt
GEMM with K' = 3K does the rest. On an H100 that GEMM runs at cuBLAS tf32's speed (≈370 TFLOP/s at
4096³), so three products plus a memory-bound pre-pass could reach the 2× cuBLAS SGEMM of issue 35
where mma.sync could not (0.54–0.60×). The open question is accuracy: the tensor core's
accumulation rounds toward zero, and here the running sum passes through it over all 3K terms
(the mma family's first 3xTF32 did that and reached 175× SGEMM's worst error at K = 16384; a fresh
partial per k-step, added in fp32, brought it to 3–4×). This probe measures both before any kernel
is written for it.

    PYTHONPATH=src python bench/probes/concat_3xtf32.py [--sizes 4096,8192] [--accuracy-k 4096,16384] [--json out.json]

Prints, per size: cuBLAS SGEMM (tf32 off), cuBLAS tf32, the K-tripled GEMM alone, the pre-pass
alone (torch eager: several passes; torch.compile: one fused kernel per operand, about 4 bytes read
and 12 written per element, the least a pre-pass can move) and the GEMM after the fused pre-pass
(µs and × SGEMM); then the accuracy report's classes (accuracy.py) for
the concatenated method beside the mma family's 3xtf32 and cuBLAS tf32. Times: gemmtune.timing's
protocol (L2 flushed before each launch, median).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from gemmtune.spec import GemmSpec  # noqa: E402

TF32_DROPPED_BITS = 13  # fp32 keeps 23 mantissa bits, tf32 10


def round_tf32(torch: Any, x: Any) -> Any:
    """x rounded to tf32's 10 mantissa bits, to nearest with ties away from zero (cvt.rna.tf32.f32),
    kept in fp32: add half of the dropped part to the magnitude's bits, then clear them."""
    bits = x.contiguous().view(torch.int32)
    half, mask = 1 << (TF32_DROPPED_BITS - 1), ~((1 << TF32_DROPPED_BITS) - 1)
    return ((bits + half) & mask).view(torch.float32)


def split_concat(torch: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """A' = [A_big | A_big | A_small] (M×3K) and B' = [B_big | B_small | B_big] (N×3K) from the
    stored nt operands A (M×K) and B (N×K)."""
    a_big, b_big = round_tf32(torch, a), round_tf32(torch, b)
    a_small, b_small = round_tf32(torch, a - a_big), round_tf32(torch, b - b_big)
    return torch.cat([a_big, a_big, a_small], dim=1), torch.cat([b_big, b_small, b_big], dim=1)


def tripled_kernel(m: int, n: int, k: int, arch: str) -> Any:
    import gemmtune

    return gemmtune.build(GemmSpec(m, n, 3 * k, "nt", "tf32"), arch=arch)


def method(torch: Any, kernel: Any) -> Any:
    """(A, B) -> D through the pre-pass and the K-tripled tf32 GEMM."""
    def run(a: Any, b: Any) -> Any:
        a3, b3 = split_concat(torch, a, b)
        return kernel(a3, b3)
    return run


def speed_rows(torch: Any, size: int, arch: str) -> list[dict]:
    from gemmtune.baseline import _fp32_precision
    from gemmtune.device import query_device
    from gemmtune.timing import TimingProtocol, measure

    m = n = k = size
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(n, k, device="cuda")
    kernel = tripled_kernel(m, n, k, arch)
    a3, b3 = split_concat(torch, a, b)
    d = torch.empty(m, n, device="cuda")
    stream, l2 = torch.cuda.current_stream().cuda_stream, query_device().l2_bytes
    protocol = TimingProtocol(warmup=3, min_reps=10, max_reps=50, min_time_s=0.2)

    def timed(launch: Any, tf32: bool = False) -> float:
        with _fp32_precision(torch, tf32=tf32):
            return measure(launch, protocol, l2, stream).median_s

    fused = torch.compile(lambda x, y: split_concat(torch, x, y))  # one generated kernel per operand
    try:
        fused(a, b)  # compiled here, not in the timing
    except Exception as err:  # a probe: say why and time the eager pre-pass in its place
        print(f"torch.compile failed ({type(err).__name__}: {str(err)[:200]}); eager pre-pass instead", flush=True)
        fused = lambda x, y: split_concat(torch, x, y)  # noqa: E731
    sgemm = timed(lambda: torch.mm(a, b.t(), out=d))
    rows = [("cuBLAS SGEMM (tf32 off)", sgemm), ("cuBLAS tf32", timed(lambda: torch.mm(a, b.t(), out=d), tf32=True)),
            ("tf32 GEMM, K tripled (pre-split operands)", timed(lambda: kernel(a3, b3, out=d))),
            ("pre-pass alone, torch eager (several passes)", timed(lambda: split_concat(torch, a, b))),
            ("pre-pass alone, torch.compile (fused)", timed(lambda: fused(a, b))),
            ("pre-pass (torch.compile) + tf32 GEMM, K tripled", timed(lambda: kernel(*fused(a, b), out=d)))]
    return [{"size": size, "what": what, "us": s * 1e6, "x_sgemm": sgemm / s} for what, s in rows]


def accuracy_rows(torch: Any, k: int, arch: str) -> list[Any]:
    import gemmtune
    from gemmtune.accuracy import INPUT_CLASSES, run_report

    spec = GemmSpec(512, 384, k, "nt", "fp32", math="3xtf32")
    kernels = [("3xtf32 (mma, per-k-step partial)", gemmtune.build(spec, arch=arch)),
               ("3xtf32 (K tripled, TC accumulation)", method(torch, tripled_kernel(512, 384, k, arch)))]
    return run_report(spec, kernels, INPUT_CLASSES)


def main() -> int:
    import torch

    from gemmtune.accuracy import format_report
    from gemmtune.device import query_device

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4096,8192")
    parser.add_argument("--accuracy-k", default="4096,16384")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    arch = query_device().arch
    speed = [row for size in args.sizes.split(",") if size for row in speed_rows(torch, int(size), arch)]
    print("| size | method | µs | × cuBLAS SGEMM |\n|---|---|---|---|")
    for row in speed:
        print(f"| {row['size']}³ | {row['what']} | {row['us']:.1f} | {row['x_sgemm']:.2f} |")
    reports = {}
    for k in (int(k) for k in args.accuracy_k.split(",") if k):
        rows = accuracy_rows(torch, k, arch)
        reports[k] = [r.to_json() for r in rows]
        print()
        print(format_report(GemmSpec(512, 384, k, "nt", "fp32"), rows))
    if args.json:
        args.json.write_text(json.dumps({"speed": speed, "accuracy": reports}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
