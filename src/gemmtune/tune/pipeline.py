"""The GPU runner: candidates compile in a process pool (NVRTC needs no GPU) and are measured one
at a time in the watched worker process, each as soon as its compile finishes.
"""
from __future__ import annotations

import os
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..errors import CompileError, ConfigError, GemmtuneError, ResourceError
from ..lifeline import spawn_pool
from ..spec import GemmSpec
from .space import CandidateSet
from .trial import Environment, Status, TrialResult
from .worker import Evaluator, MeasureJob, MeasureWorker, PairedJob, compiled_of, gpu_evaluator


@dataclass(frozen=True)
class CompileRequest:
    spec_json: dict
    family: str
    config_json: dict
    arch: str
    cache_dir: str | None = None
    protocol: Any = None


def compile_candidate(request: CompileRequest) -> MeasureJob:
    """Render and compile one config (runs in a pool process); raises the typed failure."""
    from ..compiler import compile_kernel

    from ..kernels import get_family

    family = get_family(request.family)
    spec = GemmSpec.from_json(request.spec_json)
    source = family.render(spec, family.config_from_json(request.config_json), request.arch)
    compiled = compile_kernel(source, request.arch, Path(request.cache_dir) if request.cache_dir else None)
    return MeasureJob(request.config_json, source.to_json(), request.arch, compiled.cubin,
                      compiled.resources.to_json(), compiled.compile_seconds, compiled.nvrtc_version,
                      request.protocol)


Compiler = Callable[[CompileRequest], MeasureJob]

# What a compile may fail with because of the config itself (anything else gemmtune raises there is
# the machine's problem; an exception outside gemmtune's classes is a generator bug for this config).
CANDIDATE_FAILURES = (ConfigError, CompileError, ResourceError)


def is_candidate_failure(error: BaseException) -> bool:
    """Whether a compile failure is the config's own (recorded as its trial) rather than the machine's
    (NVRTC missing, a broken install: raised, since recording it would mark good configs failed)."""
    return isinstance(error, CANDIDATE_FAILURES) or not isinstance(error, (GemmtuneError, ImportError))


class MeasurePipeline:
    """A Runner for real hardware. `compiler` and `evaluator` are injectable (module-level callables)."""

    def __init__(self, spec: GemmSpec, environment: Environment, family: str = "simt", protocol: Any = None,
                 compile_workers: int | None = None, timeout_s: float = 60.0, evaluator: Evaluator = gpu_evaluator,
                 compiler: Compiler = compile_candidate, cache_dir: Path | None = None, device: Any = None,
                 measure_worker: MeasureWorker | None = None):
        self.spec, self.environment, self.family, self.protocol = spec, environment, family, protocol
        self.device = device  # a DeviceInfo: when given, over-limit kernels are rejected before the worker
        self.compiler, self.cache_dir = compiler, cache_dir
        # One core stays free for the tuner and the measuring process.
        self.compile_workers = compile_workers or max(1, (os.cpu_count() or 2) - 1)
        self.pool: ProcessPoolExecutor | None = None
        self.ahead: dict[Any, Future] = {}  # config -> its compile, submitted by prefetch before run asks
        # A measuring child shared with other pipelines (a Dask worker's) is passed in; close() stops it too.
        self.worker = measure_worker or MeasureWorker(evaluator, timeout_s)

    def restrict(self, candidates: CandidateSet) -> CandidateSet:
        return candidates

    def run(self, configs: Sequence[Any]) -> Iterator[TrialResult]:
        futures = {self._compile(c): c for c in configs}
        try:
            for future in as_completed(futures):
                yield self._measure(futures[future], future)
        finally:  # a search that stops mid-batch (its time budget) leaves no compile queued behind it
            for future in futures:
                future.cancel()

    def prefetch(self, configs: Sequence[Any]) -> None:
        """Start compiling configs that `run` will be asked for next (the tuner's lookahead), so
        their compiles overlap the measurements of the batch before them."""
        for config in configs:
            if config not in self.ahead:
                self.ahead[config] = self._pool().submit(self.compiler, self._request(config))

    def _compile(self, config: Any) -> Future:
        return self.ahead.pop(config, None) or self._pool().submit(self.compiler, self._request(config))

    def remeasure(self, configs: Sequence[Any]) -> Iterator[TrialResult]:
        return self.run(configs)  # compiles are disk-cache hits by now

    def time_in_turn(self, configs: Sequence[Any], rounds: int) -> dict[Any, tuple[float, ...]] | None:
        """Configs measured before (their compiles disk-cache hits by now) timed in turn in the watched
        worker (worker.PairedJob): each one's seconds, round by round; one that does not compile, does
        not fit or is wrong is left out. None where the timing itself failed (tuner.compare_in_turn
        then measures one by one)."""
        jobs: dict[Any, MeasureJob] = {}
        for config in configs:
            compiled = self._compiled(config, self._compile(config))
            if isinstance(compiled, MeasureJob) and not self._resource_problems(compiled):
                jobs[config] = compiled
        if len(jobs) < 2:
            return None
        outcome = self.worker.measure(PairedJob(tuple(jobs.values()), rounds, self.protocol))
        if outcome.status is not Status.OK or len(outcome.rounds_s) != len(jobs):
            return None
        return {config: times for config, times in zip(jobs, outcome.rounds_s) if times}

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        self.ahead.clear()
        self.worker.close()

    def _pool(self) -> ProcessPoolExecutor:
        if self.pool is None:
            self.pool = spawn_pool(self.compile_workers)
        return self.pool

    def _request(self, config: Any) -> CompileRequest:
        cache = str(self.cache_dir) if self.cache_dir else None
        return CompileRequest(self.spec.to_json(), self.family, config.to_json(), self.environment.arch, cache,
                              self.protocol)

    def _measure(self, config: Any, future: Future) -> TrialResult:
        return self.measure_compiled(config, self._compiled(config, future))

    def measure_compiled(self, config: Any, compiled: MeasureJob | TrialResult) -> TrialResult:
        """A compiled candidate measured in the watched worker; a compile failure passes through.
        (The Dask layer compiles on any worker and measures here, on a GPU worker.)"""
        if isinstance(compiled, TrialResult):
            return compiled
        problems = self._resource_problems(compiled)
        if problems:
            return TrialResult(config, Status.RESOURCE_ERROR, compile_s=compiled.compile_s,
                               resources=compiled.resources, error="ResourceError: " + "; ".join(problems))
        outcome = self.worker.measure(compiled)
        return TrialResult(config, outcome.status, outcome.median_s, outcome.samples_s, compiled.compile_s,
                           compiled.resources, outcome.protocol, outcome.error)

    def _compiled(self, config: Any, future: Future) -> MeasureJob | TrialResult:
        """The compiled job, or the candidate's failure; raises failures that are no candidate's fault."""
        error = future.exception()
        if isinstance(error, BrokenProcessPool):
            # A compile process died and took the pool's other jobs with it: compile this one again
            # alone, so that only the config that kills the compiler is blamed.
            self._reset_pool()
            future = self._pool().submit(self.compiler, self._request(config))
            error = future.exception()
            if isinstance(error, BrokenProcessPool):
                self._reset_pool()
                return TrialResult(config, Status.CRASH, error="the compiling process died on this config")
        if error is None:
            return future.result()
        if is_candidate_failure(error):
            return TrialResult.failed(config, error)
        raise error

    def _reset_pool(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
        self.ahead.clear()  # their futures died with the pool: run compiles them again

    def _resource_problems(self, job: MeasureJob) -> list[str]:
        """Registers, threads or shared memory beyond the device's limits, from the ptxas report.
        Checked here because the worker would first spend seconds on inputs and the reference."""
        if self.device is None:
            return []
        from ..runtime import resource_problems

        return list(resource_problems(compiled_of(job), self.device))
