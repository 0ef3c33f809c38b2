"""What fusing the epilogue buys: D = ReLU(A·B) + C in fp32, four ways, measured in one run.

    fused          our kernel with the epilogue applied in registers at write-back
    gemm + pass    the same GEMM config without epilogue, then a separate elementwise kernel
    torch eager    cuBLAS GEMM, then torch.relu and + as separate kernels
    cuBLAS GEMM    the GEMM alone (no epilogue): the floor the unfused paths start from

Every variant is verified against the float64 reference before it is timed, and all share the
timing protocol of gemmtune.timing (L2 flushed between runs). The elementwise pass is timed twice:
alone after a flush (D and C come from DRAM), and inside the pair (the GEMM runs, untimed, between
the flush and the pass's start event, so the pass meets D as the pair leaves it). The verdict is
given for both readings of "the elementwise kernel's time". With --rounds N every variant is
measured N times, the rounds interleaved, and the table shows the median of the N medians and their
range. Prints a markdown table.

    PYTHONPATH=src python bench/bench_epilogue.py [--sizes 2048 4096] [--min-time 0.3] [--rounds 5]
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np

from gemmtune.compiler import ARCHES, CompiledKernel, compile_kernel
from gemmtune.device import DeviceInfo, query_device
from gemmtune.errors import GemmtuneError
from gemmtune.evaluate import check_output, evaluate
from gemmtune.export.config_source import ConfigChoice, choose_config
from gemmtune.kernel_source import KernelSource
from gemmtune.kernels import family_for, get_family
from gemmtune.runtime import DeviceBuffer, LoadedKernel, release, synchronize
from gemmtune.spec import GemmSpec
from gemmtune.timing import FLUSH_MODES, Measurement, TimingProtocol, measure
from gemmtune.verify import make_inputs, reference

EPILOGUE = "relu+add"
THREADS = 256


@dataclass(frozen=True)
class Row:
    size: int
    variant: str
    median_s: float | None
    note: str = ""
    spread_s: tuple[float, float] | None = None  # lowest and highest median over --rounds


# --- the separate elementwise pass ----------------------------------------------------------------
def elementwise_source(spec: GemmSpec) -> KernelSource:
    """D = max(D, 0) + C over all M·N elements, four per thread (128-bit accesses when N·M % 4 == 0)."""
    count = spec.m * spec.n
    vec = 4 if count % 4 == 0 else 1
    body = ("float4 d = reinterpret_cast<float4*>(D)[i];\n"
            "    const float4 c = reinterpret_cast<const float4*>(C)[i];\n"
            "    d.x = fmaxf(d.x, 0.0f) + c.x; d.y = fmaxf(d.y, 0.0f) + c.y;\n"
            "    d.z = fmaxf(d.z, 0.0f) + c.z; d.w = fmaxf(d.w, 0.0f) + c.w;\n"
            "    reinterpret_cast<float4*>(D)[i] = d;") if vec == 4 else "D[i] = fmaxf(D[i], 0.0f) + C[i];"
    code = f"""// The epilogue as its own pass: one more read of D and C and one more write of D.
extern "C" __global__ void relu_add_pass(const float* __restrict__ C, float* __restrict__ D) {{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // index of one float{vec if vec > 1 else ''}
    if (i >= {count // vec}) return;
    {body}
}}
"""
    grid = (-(-(count // vec) // THREADS), 1, 1)
    return KernelSource(code=code, entry="relu_add_pass", grid=grid, block=(THREADS, 1, 1), args=("C", "D"),
                        spec=spec, family="elementwise", family_version="1")


def _upload(inputs: dict) -> dict[str, DeviceBuffer]:
    return {name: DeviceBuffer.from_numpy(value) for name, value in inputs.items() if isinstance(value, np.ndarray)}


Timed = tuple[Measurement | None, Measurement | None, Measurement | None, str]  # pair, pass alone, pass in pair


def _unfused_measurement(gemm: LoadedKernel, passes: LoadedKernel, spec: GemmSpec, protocol: TimingProtocol,
                         l2_bytes: int) -> Timed:
    """Verify GEMM-then-pass once, then time the pair as one launch sequence, the pass alone, and the
    pass inside the pair (the GEMM enqueued untimed before the pass's start event)."""
    inputs = make_inputs(spec, np.random.default_rng(1))
    buffers = _upload(inputs)
    try:
        result = _verify_and_time_pair(gemm, passes, buffers, inputs, spec, protocol, l2_bytes)
    except BaseException:
        release([b.free for b in buffers.values()], after_error=True)
        raise
    release([b.free for b in buffers.values()], after_error=False)
    return result


def _verify_and_time_pair(gemm: LoadedKernel, passes: LoadedKernel, buffers: dict[str, DeviceBuffer], inputs: dict,
                          spec: GemmSpec, protocol: TimingProtocol, l2_bytes: int) -> Timed:
    buffers["D"] = DeviceBuffer.alloc(spec.m * spec.n * 4)
    first = gemm.bind({"A": buffers["A"].ptr, "B": buffers["B"].ptr, "D": buffers["D"].ptr})
    second = passes.bind({"C": buffers["C"].ptr, "D": buffers["D"].ptr})

    def both() -> None:
        first()
        second()

    buffers["D"].fill_nan()
    both()
    synchronize()
    check = check_output(buffers["D"], spec, reference(spec, inputs))
    if not check.ok:
        return None, None, None, f"wrong: {check.message}"
    return (measure(both, protocol, l2_bytes), measure(second, protocol, l2_bytes),
            measure(second, protocol, l2_bytes, before=first), "")


# --- the four rows of one size -------------------------------------------------------------------
def _compile_pair(spec: GemmSpec, choice: ConfigChoice, arch: str) -> tuple[CompiledKernel, CompiledKernel]:
    render = get_family(choice.family).render
    return (compile_kernel(render(spec, choice.config, arch), arch),
            compile_kernel(render(spec.without_epilogue(), choice.config, arch), arch))


def _fused_row(size: int, fused: CompiledKernel, protocol: TimingProtocol) -> Row:
    result = evaluate(fused, protocol)
    if not result.ok:
        return Row(size, "fused (ours)", None, f"wrong: {result.verify.message}")
    return Row(size, "fused (ours)", result.measurement.median_s)


def _unfused_row(size: int, spec: GemmSpec, plain: CompiledKernel, arch: str, protocol: TimingProtocol,
                 info: DeviceInfo) -> list[Row]:
    gemm, passes = LoadedKernel(plain), LoadedKernel(compile_kernel(elementwise_source(spec), arch))
    try:
        pair, alone, inside, note = _unfused_measurement(gemm, passes, spec, protocol, info.l2_bytes)
    except BaseException:
        release([gemm.unload, passes.unload], after_error=True)
        raise
    release([gemm.unload, passes.unload], after_error=False)
    return [Row(size, "same GEMM + elementwise pass (ours)", pair.median_s if pair else None, note),
            Row(size, "elementwise pass alone (ours)", alone.median_s if alone else None, note),
            Row(size, "elementwise pass inside the pair (ours)", inside.median_s if inside else None, note)]


def _plain_row(size: int, plain: CompiledKernel, protocol: TimingProtocol) -> Row:
    result = evaluate(plain, protocol)
    if not result.ok:
        return Row(size, "same GEMM alone, no epilogue (ours)", None, f"wrong: {result.verify.message}")
    return Row(size, "same GEMM alone, no epilogue (ours)", result.measurement.median_s)


def _baseline_row(size: int, variant: str, run) -> Row:
    try:
        return Row(size, variant, run().median_s)
    except GemmtuneError as err:  # torch missing, or a baseline that failed its own check
        return Row(size, variant, None, f"unavailable: {err}")


def bench_size(size: int, arch: str, info: DeviceInfo, protocol: TimingProtocol,
               config: str | None = None) -> tuple[list[Row], ConfigChoice]:
    from gemmtune.baseline import cublas_measurement, torch_eager_measurement
    from gemmtune.build import parse_config
    from gemmtune.export.config_source import given_config

    spec = GemmSpec(size, size, size, epilogue=EPILOGUE)
    choice = (given_config(parse_config(config, spec, arch, family_for(spec, arch)).config) if config
              else choose_config(spec, arch, info))
    fused, plain = _compile_pair(spec, choice, arch)
    rows = [
        _fused_row(size, fused, protocol),
        _plain_row(size, plain, protocol),
        *_unfused_row(size, spec, plain, arch, protocol, info),
        _baseline_row(size, "torch eager (cuBLAS + relu + add)", lambda: torch_eager_measurement(spec, protocol)),
        _baseline_row(size, "cuBLAS GEMM alone (no epilogue)", lambda: cublas_measurement(spec, protocol)),
    ]
    return rows, choice


# --- printing ------------------------------------------------------------------------------------
def combine(rounds: list[list[Row]]) -> list[Row]:
    """One row per (size, variant): the median of the rounds' medians and their range."""
    from statistics import median

    order: dict[tuple[int, str], list[Row]] = {}
    for rows in rounds:
        for r in rows:
            order.setdefault((r.size, r.variant), []).append(r)
    combined = []
    for (size, variant), rows in order.items():
        times = [r.median_s for r in rows if r.median_s is not None]
        note = next((r.note for r in rows if r.note), "")
        if len(times) < len(rows):  # a round failed: the variant has no figure
            combined.append(Row(size, variant, None, note))
            continue
        combined.append(Row(size, variant, median(times), note, (min(times), max(times)) if len(times) > 1 else None))
    return combined


def markdown(rows: list[Row]) -> str:
    lines = ["| size | variant | time (µs) | range over rounds (µs) | TFLOP/s | vs fused |", "|---|---|---|---|---|---|"]
    fused = {r.size: r.median_s for r in rows if r.variant.startswith("fused")}
    for r in rows:
        if r.median_s is None:
            lines.append(f"| {r.size}³ | {r.variant} | — | — | — | {r.note} |")
            continue
        # A GEMM's FLOP rate means nothing for the elementwise pass rows.
        tflops = "—" if r.variant.startswith("elementwise") else f"{2 * r.size**3 / r.median_s / 1e12:.2f}"
        ratio = f"{r.median_s / fused[r.size]:.2f}×" if fused.get(r.size) else "—"
        spread = f"{r.spread_s[0] * 1e6:.1f}–{r.spread_s[1] * 1e6:.1f}" if r.spread_s else "—"
        lines.append(f"| {r.size}³ | {r.variant} | {r.median_s * 1e6:.1f} | {spread} | {tflops} | {ratio} |")
    return "\n".join(lines + [""] + [fusion_verdict(rows, size) for size in sorted(fused)])


def fusion_verdict(rows: list[Row], size: int) -> str:
    """The acceptance test of the fused kernel: it must save at least the elementwise pass's time,
    judged against the pass timed alone (cold) and against the pass as it runs inside the pair."""
    times = {r.variant.split(" (")[0]: r.median_s for r in rows if r.size == size}
    fused, pair = times.get("fused"), times.get("same GEMM + elementwise pass")
    alone, inside = times.get("elementwise pass alone"), times.get("elementwise pass inside the pair")
    eager = times.get("torch eager")
    if None in (fused, pair, alone, inside):
        return f"{size}³: verdict unavailable (a row failed)"
    saved = pair - fused
    eager_text = f"; fused / torch eager = {fused / eager:.3f}" if eager else ""
    return (f"{size}³: fusion saves {saved * 1e6:.1f} µs vs the pair; the elementwise pass takes "
            f"{alone * 1e6:.1f} µs alone: {'PASS' if saved >= alone else 'FAIL'}; "
            f"{inside * 1e6:.1f} µs inside the pair: {'PASS' if saved >= inside else 'FAIL'}{eager_text}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096], help="M = N = K values")
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds of timed runs per variant")
    parser.add_argument("--flush", choices=FLUSH_MODES, default="write",
                        help="how L2 is emptied before each timed run (gemmtune.timing.TimingProtocol.flush_mode)")
    parser.add_argument("--rounds", type=int, default=1, help="measure every variant this many times, interleaved")
    parser.add_argument("--config", help="a ladder step or JSON config (default: what gemmtune export would choose)")
    args = parser.parse_args(argv)
    info = query_device()
    arch = info.arch if info.arch in ARCHES else "sm_90"
    protocol = TimingProtocol(min_time_s=args.min_time, flush_mode=args.flush)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    rounds: list[list[Row]] = []
    print(f"{info.summary()}; D = ReLU(A·B) + C, fp32, nn; protocol {protocol.to_json()}", file=sys.stderr)
    for number in range(args.rounds):
        rows: list[Row] = []
        for size in args.sizes:
            size_rows, choice = bench_size(size, arch, info, protocol, args.config)
            if number == 0:
                print(f"{size}³: {choice.describe()}; config {choice.config.describe()}", file=sys.stderr)
            rows += size_rows
        rounds.append(rows)
        print(f"round {number + 1} of {args.rounds} done", file=sys.stderr)
    rows = combine(rounds)
    print(markdown(rows))
    return 1 if any(r.note.startswith("wrong") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
