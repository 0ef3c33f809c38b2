"""The numba ladder beside the CUDA-C ladder: the same SimtConfig per step, both verified and timed
by the common path (bench.bench_config / bench.bench_compiled -> evaluate), cuBLAS in the same run.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..bench import BenchRow, bench_compiled, bench_config, bench_cublas
from ..errors import GemmtuneError
from ..kernels.simt.config import SimtConfig, ladder
from ..spec import GemmSpec
from ..timing import TimingProtocol
from .compile import compile_numba


@dataclass(frozen=True)
class LadderPair:
    """One ladder step measured twice: the CUDA-C kernel and the numba kernel of the same config."""

    step: str
    config: SimtConfig
    cuda_c: BenchRow
    numba: BenchRow

    @property
    def speed_ratio(self) -> float | None:
        """numba's speed relative to CUDA-C (CUDA-C time / numba time): 1.0 = as fast, 0.5 = twice as slow."""
        if self.cuda_c.median_s is None or self.numba.median_s is None:
            return None
        return self.cuda_c.median_s / self.numba.median_s

    def to_json(self) -> dict:
        return {"step": self.step, "config": self.config.to_json(), "cuda_c": self.cuda_c.to_json(),
                "numba": self.numba.to_json(), "speed_ratio": self.speed_ratio}


def steps(arch: str, wanted: str = "all") -> list[tuple[str, SimtConfig]]:
    """The ladder steps named in `wanted` ('all' or comma-separated), in ladder order."""
    everything = ladder(arch)
    if wanted == "all":
        return everything
    names = [w.strip() for w in wanted.split(",") if w.strip()]
    known = dict(everything)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise GemmtuneError(f"unknown ladder step(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [(n, c) for n, c in everything if n in names]


def numba_row(spec: GemmSpec, step: str, config: SimtConfig, arch: str, protocol: TimingProtocol) -> BenchRow:
    """Compile (numba -> PTX -> ptxas), verify and time one step; failures become a row."""
    name = f"numba {step}"
    try:
        compiled = compile_numba(spec, config, arch)
    except GemmtuneError as err:
        return BenchRow(name, config.describe(), None, None, None, type(err).__name__, str(err))
    return bench_compiled(name, config.describe(), compiled, protocol)


def compare_ladder(spec: GemmSpec, arch: str, protocol: TimingProtocol, wanted: str = "all",
                   on_pair: Callable[[LadderPair], None] | None = None) -> tuple[BenchRow, list[LadderPair]]:
    """cuBLAS, then each step as a CUDA-C row and a numba row, all in this process."""
    cublas = bench_cublas(spec, protocol)
    pairs = []
    for step, config in steps(arch, wanted):
        pair = LadderPair(step, config, bench_config(spec, f"CUDA-C {step}", config, arch, protocol),
                          numba_row(spec, step, config, arch, protocol))
        pairs.append(pair)
        if on_pair:
            on_pair(pair)
    return cublas, pairs


@dataclass(frozen=True)
class CompiledStep:
    """Without a GPU: what numba and ptxas made of one step (or why they could not)."""

    step: str
    summary: str  # the ptxas resource report, or the error
    ok: bool


def compile_ladder(spec: GemmSpec, arch: str, wanted: str = "all") -> list[CompiledStep]:
    found = []
    for step, config in steps(arch, wanted):
        try:
            compiled = compile_numba(spec, config, arch)
        except GemmtuneError as err:
            found.append(CompiledStep(step, f"{type(err).__name__}: {err}", False))
            continue
        found.append(CompiledStep(step, compiled.resources.summary(), True))
    return found


def markdown_table(spec: GemmSpec, cublas: BenchRow, pairs: list[LadderPair]) -> str:
    """The comparison as a Markdown table (bench/results, README)."""
    def us(row: BenchRow) -> str:
        return f"{row.median_s * 1e6:.1f}" if row.median_s is not None else row.status

    def pct(row: BenchRow) -> str:
        share = row.pct_of(cublas.median_s)
        return f"{share:.1f}%" if share is not None else "—"

    lines = [f"cuBLAS: {us(cublas)} µs ({cublas.tflops or 0:.2f} TFLOP/s), {spec.short()}", "",
             "| step | config | CUDA-C µs | CUDA-C % cuBLAS | numba µs | numba % cuBLAS | numba speed / CUDA-C "
             "| regs CUDA-C / numba | numba rel. error |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in pairs:
        ratio = f"{p.speed_ratio:.2f}" if p.speed_ratio is not None else "—"
        error = f"{p.numba.rel_error:.1e}" if p.numba.rel_error is not None else p.numba.message[:60]
        lines.append(f"| {p.step} | {p.config.describe()} | {us(p.cuda_c)} | {pct(p.cuda_c)} | {us(p.numba)} | "
                     f"{pct(p.numba)} | {ratio} | {p.cuda_c.registers} / {p.numba.registers} | {error} |")
    return "\n".join(lines)
