"""Tuning on a Dask cluster: the tuner stays on the client, trials run on the workers.

A DaskRunner is a tuner Runner whose `run` sends each config to the cluster as its own task and
gives the results back in the order asked (so a seeded search asks the same configs as a serial
run). The client alone writes the database, a trial as soon as it is back: a worker that dies takes
only its trials in flight with it, and Dask runs those again on another worker. Workers build their
own runner once from a recipe (a small frozen value): the GPU pipeline on the worker's GPU, or a
recorded table to replay. Timed sections on one GPU never overlap, whichever process runs them
(timing.py holds the per-GPU lock), so several workers may share a GPU.

Clusters: `local_cluster(pins)` starts single-threaded process workers on this machine, each
pinned to one visible GPU (one per GPU by default, round-robin when there are more); an existing
one is reached by address (`dask scheduler`, `dask worker ...`, or dask-jobqueue on SLURM/PBS).
Without the `dask` extra nothing here is imported.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..errors import GemmtuneError
from .space import CandidateSet
from .task_log import task_key
from .trial import Environment, TrialResult


class DaskMissingError(GemmtuneError):
    """The dask extra is not installed: bad input for a verb that asked for a cluster (exit 2)."""

    exit_code = 2


class ClusterError(GemmtuneError):
    """The cluster could not run a trial (its workers kept dying): this shape stops, the trials
    already back are in the database, and tune-many goes on with the next shape."""


def dask_client(scheduler: str | None, workers: int, gpus: Sequence[str] = ()) -> Any:
    """A client of the cluster at `scheduler`, or of a new local one with `workers` process workers,
    pinned round-robin to `gpus` (CUDA_VISIBLE_DEVICES values, see `pinned_gpus`) when there are any."""
    try:
        from distributed import Client
    except ImportError:
        raise DaskMissingError("--scheduler/--workers need Dask: pip install 'gemmtune[dask]'") from None
    if scheduler:
        return Client(scheduler)
    with non_daemon_workers(), sigint_ignored_by_new_processes():
        cluster = local_cluster(pinned_gpus(workers, gpus))
    return Client(cluster)


def pinned_gpus(workers: int, gpus: Sequence[str]) -> list[str | None]:
    """The GPU each of `workers` local workers sees: worker i gets gpus[i % len(gpus)], so workers
    spread evenly (two GPUs, four workers: 0, 1, 0, 1); None (no pinning) for every worker when
    there is no GPU to pin to (simulated tuning, or a CPU-only machine compiling)."""
    return [gpus[i % len(gpus)] if gpus else None for i in range(workers)]


def local_cluster(pins: Sequence[str | None]) -> Any:
    """One single-threaded process worker per entry of `pins`, each started with
    CUDA_VISIBLE_DEVICES set to its entry (its GPU is then device 0 to it, and the GPU lock, keyed
    by the GPU's UUID, still serialises workers that share one) and declaring the resource GPU=1,
    so measurements go only to workers that have a GPU. dask-cuda's LocalCUDACluster pins the same
    way; this needs no dask-cuda (the GPU machines have none). Dask's own log lines are silenced: a
    cancelled task on Ctrl-C is Dask's business, a shape whose workers fail ends in one line."""
    from distributed import Nanny, Scheduler, SpecCluster

    def worker(pin: str | None) -> dict:
        options: dict[str, Any] = {"nthreads": 1, "silence_logs": logging.CRITICAL}
        if pin is not None:
            options.update(env={"CUDA_VISIBLE_DEVICES": pin}, resources={"GPU": 1})
        return {"cls": Nanny, "options": options}

    return SpecCluster(workers={i: worker(pin) for i, pin in enumerate(pins)},
                       scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}},
                       silence_logs=logging.CRITICAL)


@contextlib.contextmanager
def sigint_ignored_by_new_processes() -> Iterator[None]:
    """Ctrl-C (or SIGINT from `timeout`) is for the client, which stops tune-many and closes the
    cluster; worker processes started meanwhile inherit an ignored SIGINT, so Python in them installs
    no KeyboardInterrupt handler and prints no traceback per worker (seen on an H100, 2026-11-25)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def non_daemon_workers() -> Any:
    """Dask starts workers as daemon processes, and a daemon may not start processes of its own; the
    GPU pipeline runs each measurement in a watched child process (and compiles in a pool). On a
    cluster started by hand, give workers DASK_DISTRIBUTED__WORKER__DAEMON=False."""
    import dask

    return dask.config.set({"distributed.worker.daemon": False})


# --- recipes: how a worker builds its runner -------------------------------------------------------
@dataclass(frozen=True)
class TableRecipe:
    """Replay a recorded table (a CSV every worker can read; tune/simulation.py)."""

    path: str
    delay_s: float = 0.0

    def build(self) -> Any:
        from .simulation import SimulationRunner, SimulationTable

        return SimulationRunner(SimulationTable.from_csv(Path(self.path)), self.delay_s)

    def local(self) -> Any:
        """A runner on the client for what needs no measuring (environment, restrict)."""
        return self.build()


@dataclass(frozen=True)
class GpuRecipe:
    """Measure on the worker's GPU through the tuner's own pipeline (watched worker, verify first).
    Compiling needs no GPU: DaskRunner compiles each config as a task of its own, on any worker, and
    measures the result on a GPU worker. `compiler`, `evaluator` and `environment` are for tests
    (module-level fakes, and no device); left None they are NVRTC, the GPU and the worker's GPU."""

    spec_json: str  # GemmSpec as JSON text (a recipe must hash)
    family: str
    timeout_s: float = 60.0
    compiler: Any = None
    evaluator: Any = None
    environment: Environment | None = None

    def build(self, measure_worker: Any = None) -> Any:
        """The pipeline; `measure_worker` (a MeasureWorker) is a measuring child to share, else its own."""
        from ..spec import GemmSpec
        from .pipeline import MeasurePipeline

        device, environment = (None, self.environment) if self.environment is not None else _this_gpu()
        return MeasurePipeline(GemmSpec.from_json(json.loads(self.spec_json)), environment, self.family,
                               timeout_s=self.timeout_s, evaluator=self.evaluator_or_gpu(), device=device,
                               measure_worker=measure_worker)

    def evaluator_or_gpu(self) -> Any:
        from .worker import gpu_evaluator

        return self.evaluator or gpu_evaluator

    def local(self) -> None:
        return None  # the client may have no GPU: the environment comes from a worker

    def compile_request(self, config: Any, arch: str) -> Any:
        from .pipeline import CompileRequest

        return CompileRequest(json.loads(self.spec_json), self.family, config.to_json(), arch)


def _this_gpu() -> tuple[Any, Environment]:
    from ..compiler import nvrtc_version
    from ..device import query_device

    device = query_device(0)
    return device, Environment.from_device(device, nvrtc_version())


_RUNNERS: dict[Any, Any] = {}  # per worker process: one runner per recipe, built on first use
_CHILDREN: dict[tuple, Any] = {}  # per worker process: one measuring child per (evaluator, timeout)


def _worker_runner(recipe: Any) -> Any:
    if recipe not in _RUNNERS:
        name_this_worker()
        _RUNNERS[recipe] = recipe.build(_shared_child(recipe)) if isinstance(recipe, GpuRecipe) else recipe.build()
    return _RUNNERS[recipe]


def _shared_child(recipe: GpuRecipe) -> Any:
    """The worker's one watched measuring child, shared by every shape's pipeline: a child per shape
    would start Python, CUDA and torch again for each shape and keep each one's GPU memory."""
    from .worker import MeasureWorker

    key = (recipe.evaluator_or_gpu(), recipe.timeout_s)
    if key not in _CHILDREN:
        _CHILDREN[key] = MeasureWorker(key[0], recipe.timeout_s)
    return _CHILDREN[key]


def name_this_worker() -> None:
    """Name this Dask worker in the GPU lock's log (GEMMTUNE_LOCK_HOLDER, inherited by the measuring
    children it starts), so a lock report counts busy time per worker. No-op outside a worker."""
    from distributed import get_worker

    from ..gpu_lock import LOCK_HOLDER_ENV

    try:
        name = get_worker().name
    except ValueError:
        return
    os.environ[LOCK_HOLDER_ENV] = f"worker-{name}"


def measure_on_worker(recipe: Any, config: Any, remeasure: bool = False) -> TrialResult:
    """One trial (a Dask task)."""
    runner = _worker_runner(recipe)
    results = runner.remeasure([config]) if remeasure else runner.run([config])
    return next(iter(results))


def compile_on_worker(recipe: GpuRecipe, config: Any, arch: str) -> Any:
    """NVRTC for one config (a Dask task; no GPU needed): the compiled job, or the config's own
    failure as a TrialResult. Failures of the machine (NVRTC missing) are raised."""
    from .pipeline import compile_candidate, is_candidate_failure

    try:
        return (recipe.compiler or compile_candidate)(recipe.compile_request(config, arch))
    except Exception as error:  # sorted as the pipeline sorts its compile failures
        if is_candidate_failure(error):
            return TrialResult.failed(config, error)
        raise


def measure_compiled_on_worker(recipe: GpuRecipe, config: Any, compiled: Any) -> TrialResult:
    """One compiled config measured on this worker's GPU (a Dask task)."""
    return _worker_runner(recipe).measure_compiled(config, compiled)


def time_in_turn_on_worker(recipe: Any, configs: list, rounds: int) -> dict | None:
    """A shape's leaders timed in turn on this worker's GPU (a Dask task: tuner.compare_in_turn's
    timing, MeasurePipeline.time_in_turn); None where the recipe's runner cannot (a replay)."""
    in_turn = getattr(_worker_runner(recipe), "time_in_turn", None)
    return in_turn(configs, rounds) if in_turn is not None else None


def environment_on_worker(recipe: Any) -> Environment:
    return _worker_runner(recipe).environment


def cublas_on_worker(spec_json: str) -> float | None:
    """cuBLAS's median for the spec on the worker's GPU (None without torch)."""
    from ..baseline import cublas_measurement
    from ..spec import GemmSpec

    name_this_worker()
    try:
        return cublas_measurement(GemmSpec.from_json(json.loads(spec_json))).median_s
    except GemmtuneError:
        return None


# --- the runner the tuner sees ---------------------------------------------------------------------
class DaskRunner:
    """A tuner Runner that measures every config as a task on the cluster behind `client`. A GPU
    recipe's configs compile as tasks of their own on any worker and are measured on workers that
    declare a GPU resource (`dask worker ... --resources GPU=1`), or on any worker where none does.

    `priority` orders this runner's tasks against other shapes' on the cluster (Dask runs higher
    first): tune-many gives each shape its share of the workload's time, so the longest shape's round
    takes the free workers first and the small shapes fill the gaps between its rounds. Without it,
    four shapes at once on four workers each got a quarter of the cluster, and the largest shape's 8
    rounds set the wall time: 90 s of a 140 s run on two GPUs, against 78 s on one."""

    def __init__(self, client: Any, recipe: Any, priority: int = 0, label: str = ""):
        self.client, self.recipe, self.priority, self.label = client, recipe, priority, label
        self.ahead: dict[Any, Any] = {}  # config -> its future, submitted by prefetch before run asks
        self.prototype = recipe.local()
        self.on_gpu = gpu_task_options(client)
        self.environment = (self.prototype.environment if self.prototype is not None
                            else client.submit(environment_on_worker, recipe, pure=False, **self.on_gpu).result())

    def restrict(self, candidates: CandidateSet) -> CandidateSet:
        return self.prototype.restrict(candidates) if self.prototype is not None else candidates

    def measurable(self, config: Any) -> bool:
        """The prototype's answer where it has one (a replay knows only its table's configs)."""
        return getattr(self.prototype, "measurable", lambda c: True)(config)

    def run(self, configs: Sequence[Any]) -> Iterator[TrialResult]:
        return self._gather(configs, remeasure=False)

    def prefetch(self, configs: Sequence[Any]) -> None:
        """Submit `configs` now (the tuner's lookahead: the next batch, asked while this one runs), so
        the cluster always holds this shape's next trials and a worker that frees up takes one
        instead of waiting for the round's slowest trial. One below the shape's priority: the
        batch asked for first still goes first."""
        for config in configs:
            if config not in self.ahead:
                self.ahead[config] = self._submit(config, remeasure=False, priority=self.priority - 1)

    def remeasure(self, configs: Sequence[Any]) -> Iterator[TrialResult]:
        return self._gather(configs, remeasure=True)

    def time_in_turn(self, configs: Sequence[Any], rounds: int) -> dict[Any, tuple[float, ...]] | None:
        """The leaders timed in turn on one GPU worker (time_in_turn_on_worker), for tuner.compare_in_turn;
        None for a recipe that cannot (the tuner then re-measures one by one)."""
        if not isinstance(self.recipe, GpuRecipe):
            return None
        future = self.client.submit(time_in_turn_on_worker, self.recipe, list(configs), rounds,
                                    key=self._key(time_in_turn_on_worker), priority=self.priority, **self.on_gpu)
        try:
            return future.result()
        finally:
            future.release()

    def _take_or_submit(self, config: Any, remeasure: bool) -> Any:
        ahead = None if remeasure else self.ahead.pop(config, None)
        return ahead if ahead is not None else self._submit(config, remeasure)

    def _submit(self, config: Any, remeasure: bool, priority: int | None = None) -> Any:
        priority = self.priority if priority is None else priority
        if not isinstance(self.recipe, GpuRecipe):
            return self.client.submit(measure_on_worker, self.recipe, config, remeasure,
                                      key=self._key(measure_on_worker), priority=priority)
        compiled = self.client.submit(compile_on_worker, self.recipe, config, self.environment.arch,
                                      key=self._key(compile_on_worker), priority=priority)
        return self.client.submit(measure_compiled_on_worker, self.recipe, config, compiled,
                                  key=self._key(measure_compiled_on_worker), priority=priority, **self.on_gpu)

    def _key(self, function: Any) -> str:
        """A fresh key naming the function and this runner's shape (task_log.py reads them back)."""
        return task_key(function.__name__, self.label, uuid.uuid4().hex)

    def _gather(self, configs: Sequence[Any], remeasure: bool) -> Iterator[TrialResult]:
        from distributed import KilledWorker

        futures = [self._take_or_submit(c, remeasure) for c in configs]
        try:
            for config, future in zip(configs, futures):
                try:
                    yield future.result()
                except KilledWorker as err:  # Dask gave up after the workers running it died, again and again
                    tries = getattr(err, "allowed_failures", None)
                    raise ClusterError(f"the cluster lost every worker that ran {config.describe()}"
                                       + (f" ({tries + 1} workers died running it)" if tries is not None else "")) from None
        finally:
            for future in futures:
                future.release()

    def close(self) -> None:
        """Cancel what was prefetched and never asked for (a budget ran out first): no worker should
        measure a trial nobody records. The client and the cluster belong to the caller."""
        for future in self.ahead.values():
            future.cancel()
        self.ahead.clear()


def workers_declare_gpus(client: Any) -> bool:
    workers = client.scheduler_info().get("workers", {}).values()
    return any(w.get("resources", {}).get("GPU") for w in workers)


def gpu_task_options(client: Any) -> dict:
    """submit() options that send a task needing a GPU to the workers declaring one (none: any worker)."""
    return {"resources": {"GPU": 1}} if workers_declare_gpus(client) else {}
