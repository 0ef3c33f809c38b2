"""MetaSchedule's builder and runner, done the gemmtune way.

MetaSchedule asks a builder to turn each candidate schedule into an artifact and a runner to
time the artifact. Here the builder converts the candidate to a KernelSource and compiles it
with NVRTC (the artifact is that KernelSource as JSON), and the runner launches it through
gemmtune's runtime and times it with gemmtune's timing protocol. So a tuned TVM kernel was
measured exactly like every other kernel in gemmtune, and tuning needs neither nvcc nor TVM's
CUDA runtime on the GPU machine.

The runner checks each candidate's output once against a float64 reference before timing it
(the inputs and reference are made once per runner): a wrong kernel must never win.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerResult

from ..compiler import CompiledKernel, compile_kernel
from ..errors import GemmtuneError
from ..kernel_source import KernelSource
from ..spec import GemmSpec
from ..timing import TimingProtocol
from .convert import kernel_source

# Short on purpose: the search compares hundreds of candidates; the winner is re-timed by
# gemmtune.evaluate with the full protocol afterwards.
TUNING_PROTOCOL = TimingProtocol(warmup=1, min_reps=3, max_reps=20, min_time_s=0.02, flush_l2=True)
# A candidate whose single checked run is this many times slower than the best so far is not timed
# further (at 4096³ some candidates take 300 ms a run): the search only needs to know it lost.
HOPELESS = 8.0
LOAD_ALLOWANCE_S = 0.05  # what loading a function may add to its first launch (see _Bench.run)
# TVM reports schedule and lowering failures as these Python exceptions (through tvm_ffi).
TVM_BUILD_FAILURES = (GemmtuneError, RuntimeError, ValueError)


def _write_artifact(directory: Path, source: KernelSource, arch: str) -> str:
    # One folder per artifact: MetaSchedule's RemoveBuildArtifact callback deletes the folder
    # holding an artifact once it has been measured.
    directory.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(dir=directory, prefix="candidate-")) / f"{source.content_hash()}-{arch}.json"
    path.write_text(json.dumps({"arch": arch, "source": source.to_json()}))
    return str(path)


def read_artifact(path: str, cache_dir: Path | None = None) -> CompiledKernel:
    """The compiled kernel behind an artifact path (NVRTC's disk cache makes this cheap)."""
    data = json.loads(Path(path).read_text())
    return compile_kernel(KernelSource.from_json(data["source"]), data["arch"], cache_dir)


def build_candidate(job: tuple[str, dict, str, str | None]) -> tuple[dict | None, str | None]:
    """Worker side of GemmtuneBuilder: a candidate IRModule (as TVM JSON) -> (KernelSource JSON, None)
    once lowered and compiled into the NVRTC disk cache, or (None, the one-line reason it failed)."""
    import tvm

    mod_json, spec_json, arch, cache = job
    try:
        source = kernel_source(tvm.ir.load_json(mod_json), GemmSpec.from_json(spec_json),
                               {"schedule": "meta_schedule candidate"}, arch)
        compile_kernel(source, arch, Path(cache) if cache else None)
    except TVM_BUILD_FAILURES as err:
        return None, f"{type(err).__name__}: {err}"
    return source.to_json(), None


@derived_object
class GemmtuneBuilder(PyBuilder):
    """Candidate module -> KernelSource -> NVRTC; the artifact is the KernelSource as JSON.

    Both halves run in a pool of spawned worker processes (one per core) kept for the whole
    search: on the H200 host, lowering 64 candidates one at a time in this process took about
    three minutes, and NVRTC another large share, while MetaSchedule's own builder is parallel too.
    """

    def __init__(self, spec: GemmSpec, arch: str, artifact_dir: Path, cache_dir: Path | None = None,
                 workers: int | None = None):
        super().__init__()
        self.spec, self.arch, self.artifact_dir, self.cache_dir = spec, arch, artifact_dir, cache_dir
        self.workers = workers or os.cpu_count() or 1
        self.pool: Any = None
        self.seconds = 0.0  # wall time spent building, so a tune can say where its time went

    def build(self, build_inputs: list) -> list:
        import tvm

        started = time.perf_counter()
        cache = str(self.cache_dir) if self.cache_dir else None
        jobs = [(tvm.ir.save_json(item.mod), self.spec.to_json(), self.arch, cache) for item in build_inputs]
        results = [self._artifact(*outcome) for outcome in self._run(jobs)]
        self.seconds += time.perf_counter() - started
        return results

    def _run(self, jobs: list) -> list[tuple[dict | None, str | None]]:
        from concurrent.futures.process import BrokenProcessPool

        from ..lifeline import spawn_pool

        if self.pool is None:
            self.pool = spawn_pool(self.workers)
        try:
            return list(self.pool.map(build_candidate, jobs))
        except BrokenProcessPool:  # a worker died (TVM or NVRTC crashed): fail this batch, start afresh
            self.close()
            return [(None, "BuildError: a build worker process died")] * len(jobs)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None

    def _artifact(self, source_json: dict | None, error: str | None) -> BuilderResult:
        if source_json is None:
            return BuilderResult(None, error)
        return BuilderResult(_write_artifact(self.artifact_dir, KernelSource.from_json(source_json), self.arch), None)


def make_builder(spec: GemmSpec, arch: str, artifact_dir: Path, cache_dir: Path | None = None) -> GemmtuneBuilder:
    return GemmtuneBuilder(spec, arch, artifact_dir, cache_dir)


class _Bench:
    """Inputs on the GPU, their reference, and a D buffer, shared by every candidate."""

    def __init__(self, spec: GemmSpec, seed: int):
        from ..runtime import DeviceBuffer
        from ..verify import make_inputs, reference

        inputs = make_inputs(spec, np.random.default_rng(seed))
        self.spec, self.expected = spec, reference(spec, inputs)
        self.buffers = {name: DeviceBuffer.from_numpy(v) for name, v in inputs.items() if isinstance(v, np.ndarray)}
        self.buffers["D"] = DeviceBuffer.alloc(spec.m * spec.n * spec.element_bytes)
        self.bindings = {name: buf.ptr for name, buf in self.buffers.items()}
        self.seconds = {"verify": 0.0, "time": 0.0}  # load + check, and the timed runs
        self.untimed = 0  # candidates not timed beyond their checked run (hopeless)

    def run(self, compiled: CompiledKernel, protocol: TimingProtocol, hopeless_s: float = float("inf")) -> list[float]:
        """Check the output of one launch, then time; raises VerifyError for a wrong kernel.

        A kernel whose checked launch took over `hopeless_s` + LOAD_ALLOWANCE_S is not timed further:
        that one launch is its sample. The allowance covers loading the function, which the first
        launch pays (lazy loading); without it a fast kernel at a small shape could look hopeless.
        At 4096³ some random candidates take 7 s a launch, so launching them once, not twice, matters.
        """
        from ..device import query_device
        from ..errors import VerifyError
        from ..runtime import LoadedKernel, synchronize
        from ..evaluate import check_output
        from ..timing import measure

        started = time.perf_counter()
        with LoadedKernel(compiled) as kernel:
            self.buffers["D"].fill_nan()
            synchronize()
            launched = time.perf_counter()
            kernel.launch(self.bindings)
            synchronize()
            first_run = time.perf_counter() - launched
            check = check_output(self.buffers["D"], self.spec, self.expected)
            checked = time.perf_counter()
            self.seconds["verify"] += checked - started
            if not check.ok:
                raise VerifyError(check.message)
            if first_run > hopeless_s + LOAD_ALLOWANCE_S:
                self.untimed += 1
                return [first_run]
            samples = list(measure(kernel.bind(self.bindings), protocol, query_device().l2_bytes).samples_s)
            self.seconds["time"] += time.perf_counter() - checked
            return samples

    def close(self) -> None:
        for buf in self.buffers.values():
            buf.free()


@derived_object
class DoneFuture(PyRunnerFuture):
    """A result that is ready: the runner measures synchronously, one candidate at a time."""

    def __init__(self, result: RunnerResult):
        super().__init__()
        self.finished = result

    def done(self) -> bool:
        return True

    def result(self) -> RunnerResult:
        return self.finished


@derived_object
class GemmtuneRunner(PyRunner):
    """Verifies and times artifacts on the GPU through gemmtune; call close() to free the buffers."""

    def __init__(self, spec: GemmSpec, protocol: TimingProtocol = TUNING_PROTOCOL, cache_dir: Path | None = None,
                 seed: int = 0):
        super().__init__()
        self.spec, self.protocol, self.cache_dir, self.seed = spec, protocol, cache_dir, seed
        self.bench: _Bench | None = None
        self.seconds = 0.0  # wall time spent verifying and timing candidates
        self.best_s = float("inf")  # fastest median so far

    def run(self, runner_inputs: list) -> list:
        started = time.perf_counter()
        futures = [DoneFuture(self._one(item.artifact_path)) for item in runner_inputs]
        self.seconds += time.perf_counter() - started
        return futures

    def _one(self, path: str) -> RunnerResult:
        try:
            self.bench = self.bench or _Bench(self.spec, self.seed)
            samples = self.bench.run(read_artifact(path, self.cache_dir), self.protocol, HOPELESS * self.best_s)
        except GemmtuneError as err:
            return RunnerResult(None, f"{type(err).__name__}: {err}")
        self.best_s = min(self.best_s, sorted(samples)[len(samples) // 2])
        return RunnerResult(samples, None)

    def phase_seconds(self) -> dict[str, float]:
        return dict(self.bench.seconds) if self.bench is not None else {}

    def untimed(self) -> int:
        return self.bench.untimed if self.bench is not None else 0

    def close(self) -> None:
        if self.bench is not None:
            self.bench.close()
            self.bench = None


def make_runner(spec: GemmSpec, protocol: TimingProtocol = TUNING_PROTOCOL, cache_dir: Path | None = None,
                seed: int = 0) -> GemmtuneRunner:
    return GemmtuneRunner(spec, protocol, cache_dir, seed)
