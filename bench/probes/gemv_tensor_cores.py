"""Probe: the gemv tensor-core path against the CUDA-core rows kernel and cuBLAS, small-batch decode.

    PYTHONPATH=src python bench/probes/gemv_tensor_cores.py [--shapes 16x4096x4096,...] [--dtypes bf16,fp16]
        [--configs '[{"threads": 256, "warps_per_output": 8, "mma_tiles": 2, "unroll": 4}]'] [--out probe.json]

For each shape (layout nt: B = W stored N×K, as torch.nn.Linear keeps it) and dtype, in one process:
- **cuda-core pick**: the config the chooser gave before the tensor-core path (its ranking of the
  CUDA-core candidates, chooser.candidates.gemv_stream_candidates);
- **tensor-core pick**: what the chooser gives now (gemmtune.chooser.choose);
- a handful of other tensor-core block shapes (TENSOR_CORE_CONFIGS, or --configs: GemvConfig fields,
  tensor_cores implied);
- cuBLAS (torch.mm into a preallocated D).
Every kernel is verified (float64 reference, poisoned D) and timed two ways, as bench_m1_stream does:
**single** (one launch between events, L2 emptied by a read pass, median: bench_untuned's protocol) and
**stream** (back to back over rotating operand sets holding ≥ 3× L2: gemmtune.stream_timing, as a
decode step runs). % copy: the bytes of A, B and D once over the time, against bench_untuned's 1 GiB
device-to-device copy bandwidth. × cuBLAS: cuBLAS's time over ours (higher is better).
Prints a markdown table; --out writes the rows as JSON.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))  # bench_untuned and bench_m1_stream: the timing they publish

from gemmtune.kernels.gemv.config import GemvConfig  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402

DEFAULT_SHAPES = "16x4096x4096,16x14336x4096,8x4096x4096,4x4096x4096,16x4096x14336"
# Block shapes beside the chooser's pick: 16-64 outputs per block, 4-16 loads of W in flight per thread.
TENSOR_CORE_CONFIGS = (
    dict(threads=256, warps_per_output=8, mma_tiles=2, unroll=4),
    dict(threads=256, warps_per_output=4, mma_tiles=2, unroll=4),
    dict(threads=512, warps_per_output=8, mma_tiles=2, unroll=4),
    dict(threads=256, warps_per_output=4, mma_tiles=4, unroll=4),
    dict(threads=128, warps_per_output=1, mma_tiles=4, unroll=4),
    dict(threads=512, warps_per_output=8, mma_tiles=1, unroll=8),
)


@dataclass(frozen=True)
class ProbeRow:
    spec: str
    dtype: str
    kernel: str  # "cuBLAS", "cuda-core pick", "tensor-core pick" (or "chooser pick") or "tensor-core"
    config: str
    bytes: int  # A + B + D once
    single_s: float | None
    stream_s: float | None
    registers: int | None
    verified: str


def us(seconds: float | None) -> str:
    return f"{seconds * 1e6:.1f}" if seconds else "-"


def ratio(cublas_s: float | None, ours_s: float | None) -> str:
    return f"{cublas_s / ours_s:.2f}" if cublas_s and ours_s else "-"


def share(nbytes: int, seconds: float | None, copy_bw: float) -> str:
    return f"{100 * nbytes / seconds / copy_bw:.0f}%" if seconds else "-"


def probe_configs(spec: GemmSpec, arch: str, sm_count: int, extra: list[dict]) -> list[tuple[str, GemvConfig]]:
    """(label, config): the CUDA-core pick, the tensor-core pick, then the other valid tensor-core shapes."""
    import importlib

    candidates_module = importlib.import_module("gemmtune.chooser.candidates")  # the package re-exports a function of that name
    from gemmtune.chooser import choose, rank_configs
    from gemmtune.chooser.candidates import gemv_stream_candidates
    from gemmtune.kernels import get_family

    candidates_module.GEMV_TENSOR_CORES_UNTUNED = True  # the probe measures the pick it would give

    family = get_family("gemv")
    cuda_core = [c for c in gemv_stream_candidates(spec) if not family.rejections(c, spec, arch)]
    pick = choose(spec, arch, sm_count).config
    found = [("cuda-core pick", rank_configs(spec, "gemv", cuda_core, sm_count)[0].config),
             ("tensor-core pick" if pick.tensor_cores else "chooser pick", pick)]
    for fields in extra:
        config = GemvConfig(tensor_cores=True, **fields)
        if config not in [c for _, c in found] and not family.rejections(config, spec, arch):
            found.append(("tensor-core", config))
    return found


def time_kernel(spec: GemmSpec, label: str, config: GemvConfig, arch: str, prepared: Any, count: int,
                protocol: Any) -> ProbeRow:
    """Build, verify and time one config both ways; a failure becomes the row's verdict."""
    import torch

    from bench_m1_stream import stream_checked

    import gemmtune
    from gemmtune.errors import GemmtuneError
    from gemmtune.evaluate import evaluate

    try:
        kern = gemmtune.build(spec, config=config, arch=arch)
        result = evaluate(kern.compiled, protocol)
    except GemmtuneError as err:
        return ProbeRow(spec.short(), spec.dtype, label, config.describe(), spec.min_bytes, None, None, None,
                        f"error: {err}")
    if not result.ok:
        return ProbeRow(spec.short(), spec.dtype, label, config.describe(), spec.min_bytes, None, None,
                        kern.resources.registers, f"WRONG: {result.verify.message}")
    stream, verdict = stream_checked(torch, kern.compiled, prepared, count, torch.cuda.current_stream().cuda_stream, "ours")
    return ProbeRow(spec.short(), spec.dtype, label, config.describe(), spec.min_bytes,
                    result.measurement.median_s, stream.per_launch_s, kern.resources.registers, "ok" + verdict)


def time_cublas_both(spec: GemmSpec, prepared: Any, count: int, protocol: Any) -> ProbeRow:
    import torch

    from bench_m1_stream import check_outputs, poisoned_sets, time_cublas
    from bench_untuned import cublas_unchecked

    from gemmtune.baseline import cublas_measurement
    from gemmtune.errors import VerifyError

    verified = "ok"
    try:
        single = cublas_measurement(spec, protocol).median_s
    except VerifyError as err:  # off our tolerance (a rounding it makes twice): timed anyway
        single, verified = cublas_unchecked(spec, protocol), f"off tolerance: {str(err)[-60:]}"
    sets = poisoned_sets(torch, prepared, count)
    stream = time_cublas(torch, spec, sets, torch.cuda.current_stream().cuda_stream)
    verified += check_outputs(sets, prepared, "cuBLAS")
    return ProbeRow(spec.short(), spec.dtype, "cuBLAS", "torch.mm", spec.min_bytes, single, stream.per_launch_s,
                    None, verified)


def probe_shape(spec: GemmSpec, arch: str, info: Any, extra: list[dict], protocol: Any) -> list[ProbeRow]:
    import torch

    from gemmtune.baseline import prepare
    from gemmtune.stream_timing import set_count

    prepared = prepare(spec)
    count = set_count(spec.min_bytes, info.l2_bytes)
    rows = [time_cublas_both(spec, prepared, count, protocol)]
    for label, config in probe_configs(spec, arch, info.sm_count, extra):
        rows.append(time_kernel(spec, label, config, arch, prepared, count, protocol))
        print(f"{spec.short()}: {label} {config.describe()}: single {us(rows[-1].single_s)} µs, "
              f"stream {us(rows[-1].stream_s)} µs (cuBLAS {us(rows[0].stream_s)}), "
              f"{rows[-1].verified}", flush=True)
    del prepared
    torch.cuda.empty_cache()
    return rows


def table(rows: list[ProbeRow], copy_bw: float, device: str) -> str:
    out = [f"# gemv tensor cores against the CUDA-core rows kernel and cuBLAS ({device}, "
           f"{datetime.date.today().isoformat()})", "",
           "`PYTHONPATH=src python bench/probes/gemv_tensor_cores.py`; single: one flushed launch (median); "
           "stream: back to back over rotating operand sets (≥ 3× L2); × cuBLAS = cuBLAS time / ours; "
           f"% copy: A + B + D once against the 1 GiB copy's {copy_bw / 1e9:.0f} GB/s.", "",
           "| shape | kernel | config | regs | single µs | × cuBLAS | % copy | stream µs | × cuBLAS | % copy | verified |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    cublas = {(r.spec, r.dtype): r for r in rows if r.kernel == "cuBLAS"}
    for r in rows:
        base = cublas[(r.spec, r.dtype)]
        out.append(f"| {r.spec} | {r.kernel} | {r.config} | {r.registers or '-'} | {us(r.single_s)} "
                   f"| {ratio(base.single_s, r.single_s)} | {share(r.bytes, r.single_s, copy_bw)} | {us(r.stream_s)} "
                   f"| {ratio(base.stream_s, r.stream_s)} | {share(r.bytes, r.stream_s, copy_bw)} | {r.verified} |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"MxNxK,... (default {DEFAULT_SHAPES})")
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--configs", help="JSON list of GemvConfig field dicts (tensor_cores implied) to time "
                                          "instead of the built-in tensor-core shapes")
    parser.add_argument("--out", type=Path, help="write the rows (and the copy bandwidth) as JSON here")
    args = parser.parse_args()

    from bench_untuned import copy_bandwidth, untuned_protocol

    from gemmtune.device import query_device

    info = query_device()
    extra = json.loads(args.configs) if args.configs else [dict(c) for c in TENSOR_CORE_CONFIGS]
    protocol = untuned_protocol()
    rows: list[ProbeRow] = []
    for dtype in args.dtypes.split(","):
        for shape in args.shapes.split(","):
            m, n, k = (int(v) for v in shape.split("x"))
            rows += probe_shape(GemmSpec(m, n, k, "nt", dtype), info.arch, info, extra, protocol)
    copy_bw = copy_bandwidth(protocol)
    print(table(rows, copy_bw, info.name))
    if args.out:
        args.out.write_text(json.dumps({"device": info.name, "arch": info.arch, "date": datetime.date.today().isoformat(),
                                        "copy_bytes_per_s": copy_bw, "rows": [asdict(r) for r in rows]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
