"""Staged operands against the kernels without them, and cuBLAS, on one GPU (docs/staging.md).

    PYTHONPATH=src python bench/probes/bench_staging.py --out staging.md --json staging.json

For each case, in one process, under bench_untuned's protocol (L2 emptied by a read pass, median):
- the chooser's pick (`gemmtune.build`, empty database), which stages A and/or B where their rows are
  not 16-byte multiples or start 16 bytes off a 32-byte sector; its time includes the copies;
- the same config without staging, where the rows allow it (16 bytes off a sector), else the mma
  family's pick (the kernel such shapes got before staging);
- the staging copies alone, as the runtime enqueues them (the staging kernel, one launch for both
  operands), and the cuMemcpy2DAsync copies it replaced;
- cuBLAS (torch.mm; fp32 with TF32 on for tf32).
Every kernel is verified (float64 reference, poisoned D) before it is timed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_untuned import untuned_protocol  # noqa: E402

UNALIGNED = ("1001x3001x1003/nt/bf16", "1001x3001x1003/nt/fp16", "1001x3001x1003/nt/tf32", "4093x4091x4097/nt/bf16",
             "4093x4091x4097/nt/tf32", "3000x5000x1500/nt/bf16", "127x129x131/nn/bf16", "4093x4091x4097/nn/fp16",
             "2999x3001x2000/tt/bf16")
OFF_SECTOR = ("4096x4096x4104/nt/bf16", "2048x2048x2056/nt/bf16", "3001x2999x776/nt/bf16", "1000x1000x1000/nt/bf16",
              "257x1023x4104/nt/bf16", "200x300x504/nt/bf16", "8192x8192x1032/nt/bf16", "4096x4096x4100/nt/tf32",
              "1000x1000x1000/nt/tf32")


def case_spec(text: str):
    from gemmtune.spec import GemmSpec

    shape, layout, dtype = text.split("/")
    m, n, k = (int(x) for x in shape.split("x"))
    return GemmSpec(m, n, k, layout, dtype)


def timed(compiled, protocol) -> tuple[float | None, str]:
    from gemmtune.evaluate import evaluate

    result = evaluate(compiled, protocol)
    return (result.measurement.median_s, "ok") if result.ok else (None, f"WRONG: {result.verify.message}")


def copies_alone(compiled, protocol) -> tuple[float, float]:
    """The staging copies of a staged kernel, enqueued as its launch enqueues them but without the
    GEMM: the staging kernel's one launch, then the cuMemcpy2DAsync copies it replaced."""
    from dataclasses import replace

    from gemmtune.device import query_device
    from gemmtune.runtime import DeviceBuffer, LoadedKernel, release
    from gemmtune.timing import measure

    spec = compiled.source.spec
    sizes = {"A": spec.m * spec.k * spec.element_bytes, "B": spec.k * spec.n * spec.element_bytes,
             "D": spec.m * spec.n * spec.out_element_bytes}
    buffers = {name: DeviceBuffer.alloc(size) for name, size in sizes.items()}
    kernels = []
    try:
        times = []
        for source in (compiled.source, replace(compiled.source, stage_kernel=False)):
            kernels.append(LoadedKernel(replace(compiled, source=source)))
            copies = kernels[-1].bind({name: b.ptr for name, b in buffers.items()}).copies

            def run(copies=copies) -> None:
                for copy in copies:
                    copy(0)
            times.append(measure(run, protocol, query_device().l2_bytes).median_s)
        return times[0], times[1]
    finally:
        release([*(b.free for b in buffers.values()), *(k.unload for k in kernels)], after_error=False)


def bench_case(text: str, protocol, db_path: Path) -> dict:
    import gemmtune
    from gemmtune.baseline import cublas_measurement
    from gemmtune.compiler import compile_kernel
    from gemmtune.errors import GemmtuneError, VerifyError
    from gemmtune.kernels import get_family
    from gemmtune.kernels.wgmma.config import staging_choice

    spec = case_spec(text)
    row = {"case": text, "spec": spec.short(), "flops": spec.flops}
    pick = gemmtune.build(spec, db_path=db_path)
    row["family"], row["config"] = pick.family, pick.config.describe()
    row["pick_s"], row["pick_verified"] = timed(pick.compiled, protocol)
    if staging_choice(spec) == (True,):
        try:
            other = gemmtune.build(spec, db_path=db_path, family="mma")
            row["other"] = f"mma {other.config.describe()}"
            row["other_s"], row["other_verified"] = timed(other.compiled, protocol)
        except GemmtuneError as err:
            row["other"], row["other_s"], row["other_verified"] = "mma", None, f"error: {err}"
    elif pick.family == "wgmma":
        flipped = pick.config.with_(stage_operands=not pick.config.stage_operands)
        family = get_family("wgmma")
        if not family.rejections(flipped, spec, "sm_90a"):
            row["other"] = flipped.describe()
            row["other_s"], row["other_verified"] = timed(compile_kernel(family.render(spec, flipped, "sm_90a"), "sm_90a"),
                                                          protocol)
    staged = pick.compiled if pick.compiled.source.staged else (
        compile_kernel(get_family("wgmma").render(spec, pick.config.with_(stage_operands=True), "sm_90a"), "sm_90a")
        if pick.family == "wgmma" and staging_choice(spec) != (False,) else None)
    row["copies_s"], row["memcpy_s"] = copies_alone(staged, protocol) if staged is not None else (None, None)
    row["copy_bytes"] = sum(2 * s.rows * s.row_bytes for s in staged.source.staged) if staged is not None else None
    try:
        row["cublas_s"] = cublas_measurement(spec, protocol).median_s
    except VerifyError as err:
        row["cublas_s"], row["cublas_note"] = None, str(err)[-80:]
    return row


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e6:.1f}"


def _rate(nbytes: int | None, seconds: float | None) -> str:
    return "-" if not nbytes or not seconds else f"{nbytes / seconds / 1e9:.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}"


def table(rows: list[dict], device: str) -> str:
    out = [f"# Staged operands ({device}, {datetime.date.today()})", "",
           "`python bench/probes/bench_staging.py`; × cuBLAS = cuBLAS time / ours (higher is better); the pick's time "
           "includes its staging copies; `copies`: those copies alone (the staging kernel), `memcpy`: the cuMemcpy2DAsync "
           "copies it replaced, alone; GB/s: the copies' bytes read and written over the kernel's time; `other`: the pick's config without "
           "staging (rows 16 bytes off a sector) or the mma family's pick (rows TMA cannot read in place).", "",
           "| case | pick (chooser) | pick µs | copies µs | memcpy µs | copies GB/s | cuBLAS µs | pick × cuBLAS | other | other µs | other × cuBLAS | verified |",
           "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    for r in rows:
        verified = r.get("pick_verified", "-") + ("" if "other_verified" not in r else f" / {r['other_verified']}")
        out.append(f"| {r['spec']} | {r['family']} {r['config']} | {_us(r.get('pick_s'))} | {_us(r.get('copies_s'))} | "
                   f"{_us(r.get('memcpy_s'))} | {_rate(r.get('copy_bytes'), r.get('copies_s'))} | "
                   f"{_us(r.get('cublas_s'))} | {_ratio(r.get('cublas_s'), r.get('pick_s'))} | {r.get('other', '-')} | "
                   f"{_us(r.get('other_s'))} | {_ratio(r.get('cublas_s'), r.get('other_s'))} | {verified} |")
    return "\n".join(out) + "\n"


def main() -> int:
    from gemmtune.device import query_device

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--case", action="append", default=[], help="MxNxK/layout/dtype (default: the built-in cases)")
    args = parser.parse_args()
    protocol = untuned_protocol()
    db_path = Path(tempfile.mkdtemp()) / "empty.sqlite"
    rows = []
    for text in args.case or UNALIGNED + OFF_SECTOR:
        rows.append(bench_case(text, protocol, db_path))
        r = rows[-1]
        print(f"{r['spec']}: pick {_us(r.get('pick_s'))} µs ({r['config']}), other {_us(r.get('other_s'))}, "
              f"copies {_us(r.get('copies_s'))} (memcpy {_us(r.get('memcpy_s'))}), cuBLAS {_us(r.get('cublas_s'))} {r.get('pick_verified')}", flush=True)
    text = table(rows, query_device().name)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(text)
    bad = [r for r in rows if r.get("pick_verified") != "ok" or r.get("other_verified", "ok") != "ok"]
    return 1 if bad or any(math.isnan(r.get("pick_s") or 0) for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
