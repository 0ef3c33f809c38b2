"""What every baseline is: a name, whether it can run a spec here, and a verified, timed row.

A baseline never raises for its own failures: a build error, a wrong result or a missing
feature becomes a row with the failure's class name as its status, as for gemmtune's kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from ..bench import BenchRow
from ..errors import GemmtuneError
from ..spec import GemmSpec
from ..timing import Measurement, TimingProtocol
from ..verify import VerifyResult


class Baseline(Protocol):
    name: str  # as on the command line: cublas, cutlass, ...

    def available(self, spec: GemmSpec) -> str | None:
        """None when this baseline can run `spec` here, else why not (one line); checked without a GPU."""

    def row(self, spec: GemmSpec, protocol: TimingProtocol, arch: str) -> BenchRow:
        """Build, verify (gemmtune's verifier) and time (gemmtune's protocol) this baseline's GEMM."""


@dataclass(frozen=True)
class Skipped:
    name: str
    reason: str

    def line(self) -> str:
        return f"skipping {self.name}: {self.reason}"

    def to_json(self) -> dict:
        return {"name": self.name, "reason": self.reason}


@dataclass(frozen=True)
class BaselineResult:
    """A verified, timed run: `label` says what ran (kernel, config, fused or GEMM only)."""

    label: str
    measurement: Measurement
    verify: VerifyResult
    compile_s: float | None = None
    notes: str = ""  # e.g. every candidate of a search with its time


def result_row(title: str, label: str, spec: GemmSpec, run: Callable[[], BaselineResult]) -> BenchRow:
    """The row of `run()`; a GemmtuneError becomes a row with `label` and the error."""
    try:
        result = run()
    except GemmtuneError as err:
        return BenchRow(title, label, None, None, None, type(err).__name__, str(err))
    m = result.measurement
    return BenchRow(title, result.label, m.median_s, spec.flops / m.median_s / 1e12, result.verify.rel_error, "ok",
                    result.notes, None, len(m.samples_s), result.compile_s)


def gemm_only(spec: GemmSpec, label: str) -> str:
    """A label that says the spec's epilogue was left out (the row times the GEMM alone)."""
    return label if spec.epilogue.is_identity else f"{label} [GEMM only, no {spec.epilogue}]"


def module_missing(module: str, extra: str) -> str | None:
    """Why `module` cannot be used (not installed), or None; checked without importing it."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    return None if found is not None else f"{module} is not installed (pip install 'gemmtune[{extra}]')"
