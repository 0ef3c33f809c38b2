"""Benchmark kernels against cuBLAS in one process: every row verified, then timed the same way."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

from .compiler import CompiledKernel, compile_kernel
from .errors import GemmtuneError
from .kernels import Family, family_of_config
from .spec import GemmSpec
from .timing import Measurement, TimingProtocol

if TYPE_CHECKING:
    from .evaluate import Evaluation


@dataclass(frozen=True)
class BenchRow:
    name: str
    config: str
    median_s: float | None
    tflops: float | None
    rel_error: float | None
    status: str  # ok, or the failure class name
    message: str = ""
    registers: int | None = None
    samples: int = 0
    compile_s: float | None = None  # baselines: build / autotune / torch.compile time before timing

    def pct_of(self, baseline_s: float | None) -> float | None:
        if baseline_s is None or self.median_s is None:
            return None
        return 100.0 * baseline_s / self.median_s

    def to_json(self) -> dict:
        return dict(self.__dict__)


def _row_from_measurement(name: str, config: str, spec: GemmSpec, m: Measurement, rel: float | None,
                          registers: int | None = None) -> BenchRow:
    return BenchRow(name, config, m.median_s, spec.flops / m.median_s / 1e12, rel, "ok", "", registers,
                    len(m.samples_s))


def evaluation_row(name: str, detail: str, spec: GemmSpec, evaluate: Callable[[], Evaluation],
                   registers: int | None) -> BenchRow:
    """Run `evaluate` (verify, then time) and make its row: failures and wrong results become rows too."""
    try:
        result = evaluate()
    except GemmtuneError as err:
        return BenchRow(name, detail, None, None, None, type(err).__name__, str(err), registers)
    if not result.verify.ok or result.measurement is None:
        return BenchRow(name, detail, None, None, result.verify.rel_error, "VerifyError", result.verify.message,
                        registers)
    return _row_from_measurement(name, detail, spec, result.measurement, result.verify.rel_error, registers)


def bench_compiled(name: str, detail: str, compiled: CompiledKernel, protocol: TimingProtocol) -> BenchRow:
    """Verify, then time, one compiled kernel of any family; failures become a row."""
    from .evaluate import evaluate

    return evaluation_row(name, detail, compiled.source.spec, lambda: evaluate(compiled, protocol),
                          compiled.resources.registers)


def bench_config(spec: GemmSpec, name: str, config: Any, arch: str, protocol: TimingProtocol,
                 family: Family | None = None) -> BenchRow:
    """Render (by `family`, default the config's own), compile, verify and time one config; failures
    become a row, never an exception."""
    try:
        family = family or family_of_config(config)
        compiled = compile_kernel(family.render(spec, config, arch), arch)
    except GemmtuneError as err:
        return BenchRow(name, config.describe(), None, None, None, type(err).__name__, str(err))
    return bench_compiled(name, config.describe(), compiled, protocol)


def cublas_label(spec: GemmSpec) -> str:
    """What the cuBLAS row runs, said plainly (see baseline.cublas_measurement)."""
    from .baseline import matmul_label

    return matmul_label(spec)


def bench_cublas(spec: GemmSpec, protocol: TimingProtocol) -> BenchRow:
    from .baseline import cublas_measurement

    label = cublas_label(spec)
    try:
        m = cublas_measurement(spec, protocol)
    except GemmtuneError as err:
        return BenchRow("cuBLAS", label, None, None, None, type(err).__name__, str(err))
    return _row_from_measurement("cuBLAS", label, spec, m, None)


def bench_many(spec: GemmSpec, candidates: Iterable[tuple[str, Any]], arch: str,
               protocol: TimingProtocol, on_row: Callable[[BenchRow], None] | None = None,
               family: Family | None = None, cublas: bool = True) -> list[BenchRow]:
    """cuBLAS first (unless `cublas` is False: the caller runs the baselines), then each candidate
    (configs of `family`, default each config's own); `on_row` sees each row as it is finished."""
    rows = []
    for name, config in [("cuBLAS", None)] * cublas + [*candidates]:
        row = (bench_cublas(spec, protocol) if config is None
               else bench_config(spec, name, config, arch, protocol, family))
        rows.append(row)
        if on_row:
            on_row(row)
    return rows
