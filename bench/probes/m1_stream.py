"""GEMVs (M = 1 to 16, or N = 1) under two protocols: one flushed launch, and back to back over rotating weights.

    python bench/probes/m1_stream.py [--shapes 1x4096x4096,...] [--dtypes fp32,bf16] [--out m1.md] [--json m1.json]

Each kernel comes from `gemmtune.build(spec)` as bench_untuned builds it (tuning database off) and is
verified and timed by `gemmtune.evaluate` with bench_untuned's protocol (one launch between CUDA
events, L2 emptied by a read pass before it, median): the single-launch column. Then, in the same
process, gemmtune.stream_timing times it back to back over R operand sets that together hold at
least 3× L2 (every launch reads cold weights, launch latency overlaps the kernel before it, as in a
decode step), and the same for cuBLAS (torch.mm into a preallocated D, fp32 with TF32 off, the
operands as cublas_measurement lays them out) and for a device-to-device copy whose read + write
bytes equal the GEMV's. GB/s counts A, B and D once (GemmSpec.min_bytes, as bench_untuned) and is
compared with bench_untuned's 1 GiB copy bandwidth. A kernel that starts with the dependent-launch
prologue (kernels/parts/dependent_launch.py, sm_90+) is streamed twice: launched so that it overlaps
the launch before it (as gemmtune launches it), and launched plainly, the same binary.
"""
from __future__ import annotations

import argparse
import datetime
import json
import tempfile
from dataclasses import asdict, dataclass
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for bench_untuned
from bench_untuned import (LAYOUT, build_and_time, copy_bandwidth,  # noqa: E402
                           launch_floor_text, untuned_protocol)

DEFAULT_SHAPES = "1x4096x4096,1x11008x4096,4096x1x4096,1x4096x11008,1x32000x4096"


@dataclass(frozen=True)
class StreamRow:
    spec: str
    dtype: str
    family: str
    config: str
    bytes: int  # A + B + D once
    sets: int  # operand sets rotated through by the stream timings
    launches: int  # launches per timed batch
    single_s: float | None  # ours: one launch, L2 flushed (bench_untuned's protocol)
    stream_s: float | None  # ours: back to back over rotating sets
    plain_stream_s: float | None  # the same, launched without dependent launch (None: the kernel has none)
    cublas_stream_s: float | None
    copy_stream_s: float | None  # a copy of `copy_bytes` (read + write), back to back over rotating buffers
    copy_bytes: int
    queued_ahead: bool  # every stream batch was queued before its start event fired
    verified: str


def gbs(nbytes: int, seconds: float | None, copy_bw: float) -> str:
    if not seconds:
        return "-"
    return f"{nbytes / seconds / 1e9:.0f} ({100 * nbytes / seconds / copy_bw:.0f}%)"


def us(seconds: float | None) -> str:
    return f"{seconds * 1e6:.1f}" if seconds else "-"


def poisoned_sets(torch, prepared, count: int) -> list[tuple]:
    """`count` distinct copies of the prepared A and B (set 0 is the prepared one) with a NaN D each."""
    from gemmtune.baseline import _torch_type

    spec, x = prepared.spec, prepared.gpu
    out_type = _torch_type(torch, spec.out_dtype)
    return [(x["A"] if i == 0 else x["A"].clone(), x["B"] if i == 0 else x["B"].clone(),
             torch.full((spec.m, spec.n), float("nan"), dtype=out_type, device="cuda")) for i in range(count)]


def check_outputs(sets: list[tuple], prepared, what: str) -> str:
    """'' when the first and last set's D match the float64 reference, else why not."""
    from gemmtune.verify import compare

    spec = prepared.spec
    for _, _, d in (sets[0], sets[-1]):
        verdict = compare(d.float().cpu().numpy(), prepared.ref, spec.dtype, spec.k, spec.out_dtype)
        if not verdict.ok:
            return f"; {what} stream output off tolerance: {verdict.message}"
    return ""


def time_ours(compiled, sets: list[tuple], stream: int, dependent_launch: bool = True):
    from gemmtune.runtime import LoadedKernel
    from gemmtune.stream_timing import kernel_launches, reps_for, time_stream

    with LoadedKernel(compiled) as loaded:
        return time_stream(kernel_launches(loaded, sets, stream, dependent_launch), len(sets), stream,
                           reps=reps_for(len(sets)))


def write_lines(lines: list[str], out: Path | None, echo: bool = True) -> None:
    """A probe's table: printed (unless `echo` is off) and written to `out` when given."""
    text = "\n".join(lines)
    if echo:
        print(text)
    if out:
        out.write_text(text + "\n")


def stream_checked(torch, compiled, prepared, count: int, stream: int, what: str, dependent_launch: bool = True):
    """`compiled` streamed over `count` fresh poisoned operand sets, then every set's D checked:
    (the timing, "" or "; <what> ... off tolerance")."""
    sets = poisoned_sets(torch, prepared, count)
    timing = time_ours(compiled, sets, stream, dependent_launch)
    verdict = check_outputs(sets, prepared, what)
    del sets  # before the caller's next sets exist
    return timing, verdict


def time_cublas(torch, spec, sets: list[tuple], stream: int):
    # The same operand views and TF32 setting as gemmtune.baseline.cublas_measurement.
    from gemmtune.baseline import _fp32_precision, _operands
    from gemmtune.stream_timing import reps_for, time_stream

    calls = [(*_operands(spec, {"A": a, "B": b}), d) for a, b, d in sets]
    with _fp32_precision(torch, tf32=False):
        return time_stream(lambda i: torch.mm(calls[i][0], calls[i][1], out=calls[i][2]), len(calls), stream,
                           reps=reps_for(len(calls)))


@dataclass(frozen=True)
class ProbeContext:
    """What the gemv probes share: bench_untuned's protocol, the GPU, the current stream, the 1 GiB copy's
    bandwidth."""

    protocol: object
    info: object
    stream: int
    copy_bw: float

    def head(self, title: str, script: str, columns: list[str], numeric: int) -> list[str]:
        """A probe's markdown head: title, what ran, the table's header; columns 2 .. 1 + numeric are numbers."""
        align = ["---"] * len(columns)
        align[-1 - numeric:-1] = ["---:"] * numeric
        from gemmtune.compiler import nvrtc_version

        return [f"# {title} ({self.info.name}, NVRTC {nvrtc_version()})", "", f"`{script}`; % of the 1 GiB copy ({self.copy_bw / 1e9:.0f} GB/s), "
                "A + B + D once.", "", "| " + " | ".join(columns) + " |", "|" + "|".join(align) + "|"]

    def kernels_head(self, title: str, script: str, label: str) -> list[str]:
        """The head of a table of kernels timed alone and streamed (stream_rows); `label`: the second column."""
        return self.head(title, script, ["shape", label, "config", "single µs (% copy)", "stream µs (% copy)",
                                         "cuBLAS stream µs", "verified"], numeric=3)

    def pct(self, spec, seconds: float | None) -> str:
        """`seconds` in µs with the share of the copy's bandwidth it moves A, B and D at ("-": none)."""
        return f"{us(seconds)} ({spec.min_bytes / seconds / self.copy_bw:.0%})" if seconds else "-"

    def operands(self, torch, spec) -> tuple[int, object, object]:
        """What a probe streams `spec` over: the operand sets that hold ≥ 3× L2 (their count), the prepared
        operands and reference, and a copy of the same bytes streamed the same way (its timing)."""
        from gemmtune.baseline import prepare
        from gemmtune.stream_timing import set_count

        count = set_count(spec.min_bytes, self.info.l2_bytes)
        prepared = prepare(spec)
        copy, _ = time_copy(torch, spec.min_bytes, self.info.l2_bytes, self.stream)
        return count, prepared, copy


def probe_spec(item: str):
    """'MxNxK:dtype' as a GemmSpec in the dtype's benchmark layout (bench_untuned.LAYOUT), or
    'MxNxK:dtype:layout' in that layout."""
    from gemmtune.spec import GemmSpec

    shape, dtype, *layout = item.split(":")
    return GemmSpec(*(int(v) for v in shape.split("x")), layout[0] if layout else LAYOUT[dtype], dtype)


def probe_context(torch) -> ProbeContext:
    from gemmtune.device import query_device

    protocol = untuned_protocol()
    return ProbeContext(protocol, query_device(), torch.cuda.current_stream().cuda_stream, copy_bandwidth(protocol))


def stream_rows(torch, spec, shown: list[tuple], stream: int, l2_bytes: int, pct) -> list[str]:
    """The probes' table rows for `spec`: each (single s, label, config, compiled, verdict) of `shown`
    streamed back to back (those with a single time) beside cuBLAS streamed once; `pct(spec, s)` formats a
    time. Each row is printed as it comes."""
    from gemmtune.baseline import prepare
    from gemmtune.stream_timing import set_count

    count = set_count(spec.min_bytes, l2_bytes)
    prepared = prepare(spec)
    sets = poisoned_sets(torch, prepared, count)
    cublas = time_cublas(torch, spec, sets, stream).per_launch_s
    del sets
    rows = []
    for single, label, config, compiled, verified in shown:
        streamed = None
        if single is not None:
            timing, verdict = stream_checked(torch, compiled, prepared, count, stream, "stream")
            streamed, verified = timing.per_launch_s, verified + verdict
        rows.append(f"| {spec.short()} | {label} | {config.describe()} | {pct(spec, single)} | {pct(spec, streamed)} "
                    f"| {us(cublas)} | {verified} |")
        print(rows[-1], flush=True)
    return rows


def time_copy(torch, nbytes: int, l2_bytes: int, stream: int):
    """A device-to-device copy moving `nbytes` (half read, half written), back to back over rotating
    buffers; returns the timing and the bytes it actually moves (16-byte rounding)."""
    from gemmtune.stream_timing import reps_for, set_count, time_stream

    words = max(4, nbytes // 2 // 16 * 4)  # float32 words per buffer
    count = set_count(2 * 4 * words, l2_bytes)
    pairs = [(torch.ones(words, device="cuda"), torch.empty(words, device="cuda")) for _ in range(count)]
    timing = time_stream(lambda i: pairs[i][1].copy_(pairs[i][0]), count, stream, reps=reps_for(count))
    return timing, 2 * 4 * words


def bench_one(spec, protocol, db_path: Path, l2_bytes: int) -> StreamRow:
    import torch

    from gemmtune.baseline import prepare
    from gemmtune.stream_timing import reps_for, set_count

    stream = torch.cuda.current_stream().cuda_stream
    count = set_count(spec.min_bytes, l2_bytes)
    built = build_and_time(spec, protocol, db_path)
    config = f"{built.config} ({built.source})" if built.kernel is not None else "-"
    single, verified = built.seconds, built.verified
    prepared = prepare(spec)
    ours, plain, queued = None, None, True
    if built.seconds is not None:  # built and verified
        compiled = built.kernel.compiled
        timing, verdict = stream_checked(torch, compiled, prepared, count, stream, "ours")
        ours, queued, verified = timing.per_launch_s, timing.queued_ahead, verified + verdict
        if compiled.source.dependent_launch:
            timing, verdict = stream_checked(torch, compiled, prepared, count, stream, "ours, plain launch",
                                             dependent_launch=False)
            plain, queued, verified = timing.per_launch_s, queued and timing.queued_ahead, verified + verdict
    sets = poisoned_sets(torch, prepared, count)
    cublas = time_cublas(torch, spec, sets, stream)
    verified += check_outputs(sets, prepared, "cuBLAS")
    del sets, prepared
    torch.cuda.empty_cache()
    copy, copy_bytes = time_copy(torch, spec.min_bytes, l2_bytes, stream)
    torch.cuda.empty_cache()
    return StreamRow(spec.short(), spec.dtype, built.family, config, spec.min_bytes, count, count * reps_for(count),
                     single, ours, plain, cublas.per_launch_s, copy.per_launch_s, copy_bytes,
                     queued and cublas.queued_ahead and copy.queued_ahead, verified)


def table(rows: list[StreamRow], copy_bw: float, floor: str, device: str) -> str:
    from gemmtune.compiler import nvrtc_version

    today = datetime.date.today().isoformat()
    out = [f"# GEMVs: single launch and back to back ({device}, {today}, NVRTC {nvrtc_version()})", "",
           "`python bench/probes/m1_stream.py`: `gemmtune.build(spec)` with an empty tuning database, verified "
           "(float64 reference, poisoned D), then timed two ways in one process:",
           "- **single**: one launch between its CUDA events, L2 emptied by a read pass before it, median "
           "(bench_untuned's protocol; it includes the fixed launch + event cost: an empty kernel timed so "
           f"takes {floor});",
           "- **stream**: R × reps launches back to back between one event pair, rotating over R operand sets "
           "that together hold ≥ 3× L2 (every launch reads cold from DRAM, no flush), queued behind a hold "
           "kernel so the GPU sets the pace; median over 5 batches of batch time / launches "
           "(`gemmtune.stream_timing`); a kernel with the dependent-launch prologue (sm_90+) is launched so "
           "that it overlaps the launch before it, and again plainly (the plain column; - where it has none).",
           "cuBLAS is torch.mm into a preallocated D (fp32 with TF32 off), streamed the same way; the copy "
           "moves the GEMV's bytes (read + write), streamed the same way. GB/s counts A, B and D once; "
           f"% is of the 1 GiB device-to-device copy (read + write, L2 flushed): **{copy_bw / 1e9:.0f} GB/s**. "
           "ratio = cuBLAS stream time / ours (higher is better).", ""]
    for dtype in sorted({r.dtype for r in rows}, key=lambda d: d != "fp32"):
        out += [f"## {dtype} (layout {LAYOUT[dtype]})", "",
                "| shape | config (source) | single µs | single GB/s (% copy) | stream µs | stream GB/s (% copy) "
                "| plain stream µs | plain GB/s (% copy) "
                "| cuBLAS stream µs | ratio | same-size copy stream GB/s (% copy) | sets, launches/batch | verified |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in (r for r in rows if r.dtype == dtype):
            ratio = f"{r.cublas_stream_s / r.stream_s:.3f}" if r.stream_s and r.cublas_stream_s else "-"
            queued = "" if r.queued_ahead else " (a batch was not queued ahead: host-bound)"
            out.append(f"| {r.spec} | {r.config} | {us(r.single_s)} | {gbs(r.bytes, r.single_s, copy_bw)} "
                       f"| {us(r.stream_s)} | {gbs(r.bytes, r.stream_s, copy_bw)} "
                       f"| {us(r.plain_stream_s)} | {gbs(r.bytes, r.plain_stream_s, copy_bw)} | {us(r.cublas_stream_s)} | {ratio} "
                       f"| {gbs(r.copy_bytes, r.copy_stream_s, copy_bw)} | {r.sets}, {r.launches} "
                       f"| {r.verified}{queued} |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"MxNxK,... (default {DEFAULT_SHAPES})")
    parser.add_argument("--dtypes", default="fp32,bf16", help="fp32 (layout nn) and/or bf16 (layout nt)")
    parser.add_argument("--out", type=Path, help="write the markdown table here too")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()

    from gemmtune.device import query_device
    from gemmtune.spec import GemmSpec

    protocol = untuned_protocol()  # bench_untuned's: L2 emptied by a read pass before each timed launch
    db_path = Path(tempfile.mkdtemp()) / "empty.sqlite"  # no tuning: a fresh, empty database
    info = query_device()
    rows = []
    for dtype in args.dtypes.split(","):
        for shape in args.shapes.split(","):
            m, n, k = (int(v) for v in shape.split("x"))
            rows.append(bench_one(GemmSpec(m, n, k, LAYOUT[dtype], dtype), protocol, db_path, info.l2_bytes))
            r = rows[-1]
            print(f"{r.spec}: single {us(r.single_s)} µs, stream {us(r.stream_s)} µs (plain {us(r.plain_stream_s)}), cuBLAS stream "
                  f"{us(r.cublas_stream_s)} µs, copy stream {us(r.copy_stream_s)} µs, {r.verified}", flush=True)
    copy_bw = copy_bandwidth(protocol)
    text = table(rows, copy_bw, launch_floor_text(protocol), info.name)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps({"device": info.name, "date": datetime.date.today().isoformat(),
                                         "copy_bytes_per_s": copy_bw, "rows": [asdict(r) for r in rows]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
