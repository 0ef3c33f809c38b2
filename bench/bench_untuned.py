"""Fast without tuning: 24 shapes nobody tuned, fp32 and bf16, each against cuBLAS in the same run.

    python bench/bench_untuned.py [--out results.md] [--json rows.json] [--dtypes fp32,bf16]

Every kernel comes from `gemmtune.build(spec)` exactly as a new user gets it (tuning database off:
the chooser or the shipped table decides), is verified against the float64 reference with a poisoned
D, and timed with the same protocol (L2 flushed, median) as cuBLAS (torch.mm; fp32 with TF32 off).
M = 1 / N = 1 rows are also given in GB/s (the bytes of A, B and D once) against the measured copy
bandwidth (a device-to-device copy of 1 GiB: read + write bytes over its time).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

# (M, N, K): LLM layers (LLaMA-7B MLP and attention, decode at batch 1 and 16, the LM head), odd sizes,
# and skinny shapes. K is a multiple of 8 so the bf16 rows meet TMA's 16-byte row rule (layout nt).
BENCH_SHAPES: tuple[tuple[int, int, int], ...] = (
    (4096, 11008, 4096), (4096, 4096, 11008), (8192, 1024, 8192), (2048, 5120, 5120), (6144, 6144, 2048),
    (12288, 4096, 1024), (512, 4096, 4096), (128, 4096, 14336), (16, 4096, 4096), (64, 8192, 8192),
    (1, 4096, 4096), (1, 11008, 4096), (1, 4096, 11008), (1, 32000, 4096), (4096, 1, 4096),
    (1024, 1024, 16384), (2048, 2048, 8192), (4096, 128, 4096), (3001, 2999, 776), (1000, 1000, 1000),
    (257, 1023, 4104), (777, 3333, 1536), (5000, 300, 2048), (200, 300, 504),
)
# The evaluation set of issue 34 (`--set eval`): the 24 above and 20 more LLM and odd shapes, none of
# them a chooser training shape (tests/test_bench_sets.py): Llama-3-8B's q/o, gate/up and down at
# prefill, small batches and decode, few tiles with a long K, a short K, and two shapes no 16-byte row
# rule holds for (the mma family runs them).
EVAL_EXTRA: tuple[tuple[int, int, int], ...] = (
    (4096, 14336, 4096), (4096, 4096, 14336), (2048, 5120, 1280), (64, 14336, 4096), (128, 14336, 4096),
    (32, 4096, 11008), (16, 14336, 4096), (8, 4096, 4096), (2, 4096, 4096), (1, 1024, 4096),
    (1, 4096, 14336), (6144, 6144, 96), (96, 96, 65536), (512, 512, 65536), (3072, 3072, 3072),
    (1536, 6144, 1536), (8192, 8192, 1024), (10240, 2560, 2560), (1001, 3001, 1003), (4093, 4091, 4097),
)
EVAL_SHAPES = BENCH_SHAPES + EVAL_EXTRA
LAYOUT = {"fp32": "nn", "bf16": "nt", "fp16": "nt", "tf32": "nt"}  # 16-bit as torch.nn.Linear stores it: B = Wᵀ (N×K)


@dataclass(frozen=True)
class Row:
    spec: str
    dtype: str
    family: str
    config: str
    source: str
    ours_s: float | None
    cublas_s: float | None
    bytes: int
    verified: str

    @property
    def ratio(self) -> float | None:
        return self.cublas_s / self.ours_s if self.ours_s and self.cublas_s else None


def copy_bandwidth(protocol) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write), L2 flushed like the GEMMs."""
    import torch

    from gemmtune.device import query_device
    from gemmtune.timing import measure

    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda").fill_(1.0)
    dst = torch.empty_like(src)
    stream = torch.cuda.current_stream().cuda_stream
    m = measure(lambda: dst.copy_(src), protocol, query_device().l2_bytes, stream)
    return 2 * src.numel() * 4 / m.median_s


def untuned_protocol():
    """The timing protocol of these tables. "read" flush: L2 emptied by reading a clean buffer (no
    dirty lines for the timed kernel to write back, which would cost a GEMV of 32 MB several µs); the
    same protocol for ours, cuBLAS and the copy."""
    from gemmtune.timing import TimingProtocol

    return TimingProtocol(warmup=3, min_reps=10, max_reps=100, min_time_s=0.05, flush_mode="read")


@dataclass(frozen=True)
class Ours:
    """Our kernel for a spec as a new user gets it, verified and timed (kernel None when the build failed)."""

    kernel: object
    family: str
    config: str
    source: str
    seconds: float | None  # None unless verified
    verified: str


def build_and_time(spec, protocol, db_path: Path, family: str | None = None) -> Ours:
    """`gemmtune.build(spec)` with the tuning database at `db_path`, verified against the float64
    reference (poisoned D) and timed by `protocol`; a failure becomes the verdict, never an exception."""
    import gemmtune
    from gemmtune.errors import GemmtuneError
    from gemmtune.evaluate import evaluate

    try:
        kern = gemmtune.build(spec, db_path=db_path, family=family)
        result = evaluate(kern.compiled, protocol)
    except GemmtuneError as err:
        return Ours(None, "-", "-", "-", None, f"error: {err}")
    return Ours(kern, kern.family, kern.config.describe(), kern.config_source.split(" (")[0],
                result.measurement.median_s if result.ok else None,
                "ok" if result.ok else f"WRONG: {result.verify.message}")


def bench_one(spec, protocol, db_path: Path, family: str | None = None) -> Row:
    from gemmtune.baseline import cublas_measurement
    from gemmtune.errors import VerifyError

    ours = build_and_time(spec, protocol, db_path, family)
    verified = ours.verified
    try:
        cublas = cublas_measurement(spec, protocol).median_s
    except VerifyError as err:  # cuBLAS itself off our tolerance (e.g. split-K rounding bf16 twice): time it anyway
        cublas, verified = cublas_unchecked(spec, protocol), f"{verified}; cuBLAS off tolerance: {str(err)[-60:]}"
    return Row(spec.short(), spec.dtype, ours.family, ours.config, ours.source, ours.seconds, cublas, spec.min_bytes,
               verified)


def cublas_unchecked(spec, protocol) -> float:
    """cuBLAS's time for the spec (torch.mm into a preallocated D, same protocol), without the check."""
    import numpy as np
    import torch

    from gemmtune.device import query_device
    from gemmtune.timing import measure
    from gemmtune.verify import make_inputs

    x = make_inputs(spec, np.random.default_rng(0))
    kind = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(spec.dtype, torch.float32)
    a, b = (torch.from_numpy(x[n]).cuda().to(kind) for n in ("A", "B"))
    a, b = (a.t() if spec.a_trans else a), (b.t() if spec.b_trans else b)
    out = torch.empty((spec.m, spec.n), dtype=kind, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    return measure(lambda: torch.mm(a, b, out=out), protocol, query_device().l2_bytes, stream).median_s


def launch_floor_s(protocol) -> float:
    """The median time of a kernel that does nothing, timed like the rows: what every launch costs
    before it moves a byte (it weighs on a 15 µs GEMV, not on a 1 GiB copy)."""
    from gemmtune.compiler import compile_kernel
    from gemmtune.device import query_device
    from gemmtune.kernel_source import KernelSource
    from gemmtune.runtime import DeviceBuffer, LoadedKernel
    from gemmtune.spec import GemmSpec
    from gemmtune.timing import measure

    # KernelSource is the GEMM artifact: the empty kernel borrows its A and D parameters, never read.
    source = KernelSource(code='extern "C" __global__ void nothing(const float* A, float* D) {}', entry="nothing",
                          grid=(132, 1, 1), block=(128, 1, 1), args=("A", "D"), spec=GemmSpec(1, 1, 1),
                          family="floor", family_version="1")
    with DeviceBuffer.alloc(4) as scratch, LoadedKernel(compile_kernel(source, query_device().arch)) as kernel:
        return measure(kernel.bind({"A": scratch, "D": scratch}), protocol, query_device().l2_bytes).median_s


def launch_floor_text(protocol) -> str:
    """launch_floor_s as a note for a table header: the time, or why it is missing (the table stays)."""
    try:
        return f"{launch_floor_s(protocol) * 1e6:.1f} µs"
    except Exception as exc:  # a note only: say why it is missing
        return f"unavailable ({type(exc).__name__}: {exc})"


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def table(rows: list[Row], copy_bw: float, device: str) -> str:
    from gemmtune.compiler import nvrtc_version

    today = datetime.date.today().isoformat()
    out = [f"# Untuned shapes vs cuBLAS ({device}, {today}, NVRTC {nvrtc_version()})", "",
           "`python bench/bench_untuned.py`: `gemmtune.build(spec)` with an empty tuning database (the chooser "
           "picks), verified (float64 reference, poisoned D), timed with L2 flushed by a read pass (median), cuBLAS "
           "(torch.mm, fp32 with TF32 off) in the same process. ratio = cuBLAS time / ours (higher is better).",
           f"Copy bandwidth (1 GiB device-to-device, read + write): **{copy_bw / 1e9:.0f} GB/s**.", ""]
    for dtype in sorted({r.dtype for r in rows}, key=lambda d: d != "fp32"):
        sel = [r for r in rows if r.dtype == dtype]
        out += [f"## {dtype} (layout {LAYOUT.get(dtype, 'as in each row')})", "",
                "| shape | family | config (source) | ours µs | cuBLAS µs | ratio | GB/s (% of copy) | verified |",
                "|---|---|---|---:|---:|---:|---:|---|"]
        for r in sel:
            gbs = ""
            m, n = (int(x) for x in r.spec.split()[0].split("x")[:2])
            if r.ours_s and min(m, n) <= 16:  # streaming shapes: bandwidth is their measure
                gbs = f"{r.bytes / r.ours_s / 1e9:.0f} ({100 * r.bytes / r.ours_s / copy_bw:.0f}%)"
            ours = f"{r.ours_s * 1e6:.1f}" if r.ours_s else "-"
            ratio = f"{r.ratio:.3f}" if r.ratio else "-"
            out.append(f"| {r.spec} | {r.family} | {r.config} ({r.source}) | {ours} | {r.cublas_s * 1e6:.1f} | "
                       f"{ratio} | {gbs} | {r.verified} |")
        ratios = [r.ratio for r in sel if r.ratio]
        lowest = min((r for r in sel if r.ratio), key=lambda r: r.ratio, default=None)
        out += ["", f"**geomean {dtype}: {geomean(ratios):.3f}× cuBLAS** over {len(ratios)} of {len(sel)} shapes"
                + (f"; lowest {lowest.ratio:.3f}× ({lowest.spec})" if lowest else ""), ""]
    return "\n".join(out)


def _case_spec(text: str):
    from gemmtune.spec import GemmSpec

    shape, layout, dtype = text.split("/")
    m, n, k = (int(x) for x in shape.lower().split("x"))
    return GemmSpec(m, n, k, layout, dtype)


def main() -> int:
    from gemmtune.device import query_device
    from gemmtune.spec import GemmSpec

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the markdown table here too")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    parser.add_argument("--dtypes", default="fp32,bf16", help="default fp32,bf16 (the eval set: give bf16,fp16,tf32,fp32)")
    parser.add_argument("--set", choices=("bench", "eval"), default="bench", dest="shape_set",
                        help="bench: the 24 shapes; eval: issue 34's evaluation set (44 shapes)")
    parser.add_argument("--shapes", help="only these shapes, e.g. 1x4096x4096,4096x1x4096 (default the whole set)")
    parser.add_argument("--case", action="append", default=[],
                        help="instead of the 24 shapes: MxNxK/layout/dtype, e.g. 4093x4091x4097/nt/bf16 (repeatable)")
    parser.add_argument("--family", help="force a generator family (e.g. mma) instead of the registry's choice")
    parser.add_argument("--db", type=Path, help="read this tuning database (e.g. after `gemmtune tune ... t=4`) "
                                                "instead of a fresh, empty one")
    args = parser.parse_args()
    wanted = set(args.shapes.split(",")) if args.shapes else None
    protocol = untuned_protocol()
    db_path = args.db or Path(tempfile.mkdtemp()) / "empty.sqlite"  # untuned: a fresh, empty database
    rows = []
    specs = [_case_spec(text) for text in args.case] or [
        GemmSpec(m, n, k, LAYOUT[d], d) for d in args.dtypes.split(",")
        for m, n, k in (EVAL_SHAPES if args.shape_set == "eval" else BENCH_SHAPES)
        if wanted is None or f"{m}x{n}x{k}" in wanted]
    for spec in specs:
        rows.append(bench_one(spec, protocol, db_path, args.family))
        r = rows[-1]
        print(f"{r.spec}: {r.family} {r.config} ours {r.ours_s} cuBLAS {r.cublas_s} ratio {r.ratio} {r.verified}",
              flush=True)
    text = table(rows, copy_bandwidth(protocol), query_device().name)
    text += f"\nAn empty kernel under the same protocol (launch and event floor): {launch_floor_text(protocol)}.\n"
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
