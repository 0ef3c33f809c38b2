"""CUTLASS, as its profiler would pick: build every candidate for the spec, verify and time each,
keep the fastest verified one.

Candidates are rendered by cutlass_source.py and built by cutlass_build.py (nvcc, cached). Each
library is loaded with ctypes and launched on the pointers of torch tensors, on torch's current
stream, so gemmtune's verifier and timing protocol see it like any other baseline.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..bench import BenchRow
from ..errors import ConfigError, GemmtuneError, LaunchError
from ..spec import GemmSpec
from ..timing import TimingProtocol
from .base import BaselineResult, gemm_only, module_missing, result_row
from .cutlass_build import Built, Toolchain, build_all, find_toolchain
from .cutlass_source import CutlassCandidate, candidates, fuses


def cutlass_arch(device_arch: str) -> str:
    """Hopper's wgmma and TMA need the arch-specific target; other arches build as they are."""
    return "sm_90a" if device_arch.startswith("sm_90") else device_arch


class CutlassLibrary:
    """One built candidate, loaded: prepare(pointers) -> a launch bound to torch's current stream."""

    def __init__(self, built: Built):
        self.built = built
        self.lib = ctypes.CDLL(str(built.library))
        self.lib.gemmtune_cutlass_prepare.argtypes = [ctypes.POINTER(ctypes.c_void_p)] + [ctypes.c_void_p] * 4 + \
            [ctypes.c_int] * 3
        self.lib.gemmtune_cutlass_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.lib.gemmtune_cutlass_release.argtypes = [ctypes.c_void_p]
        self.lib.gemmtune_cutlass_message.argtypes = [ctypes.c_int]
        self.lib.gemmtune_cutlass_message.restype = ctypes.c_char_p
        self.handles: list[ctypes.c_void_p] = []

    def _fail(self, what: str, code: int) -> GemmtuneError:
        message = self.lib.gemmtune_cutlass_message(code).decode()
        kind = ConfigError if what == "prepare" and code > 0 else LaunchError
        return kind(f"CUTLASS {self.built.candidate.describe()}: {what} failed: {message}", str(self.built.library))

    def bind(self, torch: Any, spec: GemmSpec, x: dict, out: Any) -> Callable[[], Any]:
        handle = ctypes.c_void_p()
        c = x["C"].data_ptr() if "C" in x else None
        code = self.lib.gemmtune_cutlass_prepare(ctypes.byref(handle), x["A"].data_ptr(), x["B"].data_ptr(), c,
                                                 out.data_ptr(), spec.m, spec.n, spec.k)
        if code:
            raise self._fail("prepare", code)
        self.handles.append(handle)

        def launch() -> Any:
            code = self.lib.gemmtune_cutlass_run(handle, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
            if code:
                raise self._fail("launch", code)
            return out
        return launch

    def release(self) -> None:
        for handle in self.handles:
            self.lib.gemmtune_cutlass_release(handle)
        self.handles = []


@dataclass(frozen=True)
class Raced:
    candidate: CutlassCandidate
    median_s: float | None
    status: str  # ok or the failure's class name


def _race(spec: GemmSpec, built: list[Built], protocol: TimingProtocol) -> tuple[list[Raced], BaselineResult | None]:
    """Verify and time each built candidate; the fastest verified one's result."""
    from ..baseline import _torch, _torch_type, check_and_time, prepare

    torch = _torch()
    prepared = prepare(spec)
    out = torch.empty((spec.m, spec.n), dtype=_torch_type(torch, spec.out_dtype), device="cuda")
    raced, best = [], None
    for item in built:
        library = CutlassLibrary(item)
        label = item.candidate.describe()
        try:
            out.fill_(float("nan"))  # an unwritten element shows
            launch = library.bind(torch, spec, prepared.gpu, out)
            measured, verdict = check_and_time(prepared, launch, protocol, "CUTLASS", label=label)
        except GemmtuneError as err:
            raced.append(Raced(item.candidate, None, type(err).__name__))
            continue
        finally:
            torch.cuda.synchronize()
            library.release()
        raced.append(Raced(item.candidate, measured.median_s, "ok"))
        if best is None or measured.median_s < best.measurement.median_s:
            best = BaselineResult(label, measured, verdict)
    return raced, best


def _notes(raced: list[Raced], failures: list[GemmtuneError]) -> str:
    """Every candidate's median (or failure), as the profiler's report lists them."""
    times = [f"{r.candidate.describe()}: " + (f"{r.median_s * 1e6:.1f} us" if r.median_s else r.status) for r in raced]
    return "; ".join(times + [f"build failed: {err}"[:200] for err in failures])


def _summary(raced: list[Raced], failures: list[GemmtuneError]) -> str:
    ok = sum(r.status == "ok" for r in raced)
    return f"fastest of {ok} verified / {len(raced) + len(failures)} built"


@dataclass(frozen=True)
class Cutlass:
    name: str = "cutlass"
    limit: int | None = None  # race only the first `limit` candidates (tests, quick looks)

    def available(self, spec: GemmSpec) -> str | None:
        missing = module_missing("cutlass_library", "cutlass") or module_missing("torch", "torch")
        if missing:
            return missing
        try:
            candidates(spec, "sm_90a")
        except ConfigError as err:
            return str(err)
        found = find_toolchain()
        return found if isinstance(found, str) else None

    def run(self, spec: GemmSpec, protocol: TimingProtocol, arch: str) -> BaselineResult:
        toolchain = find_toolchain()
        if isinstance(toolchain, str):
            raise ConfigError(toolchain)
        arch = cutlass_arch(arch)
        wanted = candidates(spec, arch)[:self.limit]
        fused = fuses(spec, wanted[0])
        kernel_spec = spec if fused else spec.without_epilogue()
        started = time.perf_counter()
        results = build_all(toolchain, kernel_spec, wanted, arch)
        build_s = time.perf_counter() - started
        built = [r for r in results if isinstance(r, Built)]
        failures = [r for r in results if not isinstance(r, Built)]
        if not built:
            raise failures[0]
        raced, best = _race(kernel_spec, built, protocol)
        if best is None:
            raise ConfigError(f"no CUTLASS candidate passed verification ({_summary(raced, failures)})")
        label = f"{best.label}{' + EVT ' + str(spec.epilogue) if fused else ''}, {_summary(raced, failures)}"
        return BaselineResult(label if fused else gemm_only(spec, label), best.measurement, best.verify, build_s,
                              _notes(raced, failures))

    def row(self, spec: GemmSpec, protocol: TimingProtocol, arch: str) -> BenchRow:
        return result_row("CUTLASS", "CUTLASS profiler-style search", spec, lambda: self.run(spec, protocol, arch))


BASELINE = Cutlass()
