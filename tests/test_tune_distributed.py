"""Tuning a workload (tune/many.py) serially and on a Dask cluster (tune/distributed.py), with the
simulation runner: no GPU needed.

The cluster is a LocalCluster of 4 single-threaded process workers. A seeded tune of 12 shapes on
it leaves the same database as the same tune run serially, and a worker killed mid-run loses no
finished trial: Dask runs its trials in flight again elsewhere and the run completes.
"""
from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from gemmtune.cli import main
from gemmtune.spec import GemmSpec
from gemmtune.tune.db import TuningDB
from gemmtune.tune.distributed import DaskRunner, TableRecipe
from gemmtune.tune.many import budgets, tune_many
from gemmtune.tune.simulation import table_path
from gemmtune.tune.tuner import IN_TURN_ROUNDS, TuneOptions
from gemmtune.workload import Workload, WorkloadShape, load_workload, save_workload
from test_tune_simulation import synthetic_table

SHAPES = [GemmSpec(m, n, k) for m, n, k in ((512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
                                            (4096, 4096, 4096), (768, 3072, 768), (3072, 768, 768),
                                            (1024, 4096, 1024), (4096, 1024, 4096), (256, 8192, 512),
                                            (8192, 256, 512), (2048, 512, 8192), (1536, 1536, 1536))]
OPTIONS = TuneOptions(family="simt", strategy="evolutionary", seed=3, batch=8, remeasure_top=2, chooser_seeds=2)
TOTAL_TRIALS = 12 * 20


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> Path:
    """A synthetic simt table per shape, written where --simulate DIR looks for it."""
    directory = tmp_path_factory.mktemp("tables")
    for i, spec in enumerate(SHAPES):
        synthetic_table(spec, rows=300, seed=i).to_csv(table_path("simt", spec, directory))
    return directory


@pytest.fixture(scope="module")
def workload() -> Workload:
    return Workload(tuple(WorkloadShape(spec, count=1 + i % 3) for i, spec in enumerate(SHAPES)))


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=4, threads_per_worker=1, processes=True, dashboard_address=":0")
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _serial(tables: Path, delay_s: float = 0.0):
    return lambda spec, family: TableRecipe(str(table_path(family, spec, tables)), delay_s).build()


def _on_cluster(client, tables: Path, delay_s: float = 0.0):
    return lambda spec, family: DaskRunner(client, TableRecipe(str(table_path(family, spec, tables)), delay_s))


def _trials(db_path: Path) -> list[tuple]:
    """Every trial but its time of recording: context, config, phase, status, median."""
    with sqlite3.connect(db_path) as conn:
        return sorted(conn.execute("SELECT context_key, config_key, phase, status, median_s FROM trials").fetchall())


def _tune(db_path: Path, workload: Workload, runner_for, options: TuneOptions = OPTIONS, at_once: int = 1) -> list:
    with TuningDB(db_path) as db:
        return tune_many(workload, runner_for, db, "sm_90", options, total_trials=TOTAL_TRIALS, family="simt",
                         shapes_at_once=at_once)


def test_budget_split_follows_the_shares(workload):
    parts = budgets(workload, total_trials=TOTAL_TRIALS)
    shares = workload.shares()
    assert abs(sum(shares) - 1) < 1e-12 and all(p.trials >= 4 for p in parts)
    biggest = max(range(len(parts)), key=lambda i: shares[i])
    assert parts[biggest].trials == max(p.trials for p in parts)
    given = Workload((WorkloadShape(SHAPES[0], share=3.0), WorkloadShape(SHAPES[1], share=1.0)))
    assert [p.trials for p in budgets(given, total_trials=100)] == [75, 25]


def test_a_time_budget_stretches_over_shapes_tuned_at_once(workload):
    from gemmtune.tune.many import overlapped_times

    plan = budgets(workload, total_time_s=600.0)
    stretched = overlapped_times(plan, 600.0, 4)
    assert [b.time_s for b in stretched] == [min(600.0, 4 * b.time_s) for b in plan]
    assert overlapped_times(plan, None, 4) == plan and sum(b.time_s for b in plan) >= 600.0


def test_the_cluster_leaves_the_database_a_serial_run_leaves(tables, workload, client, tmp_path):
    serial = _tune(tmp_path / "serial.sqlite", workload, _serial(tables))
    clustered = _tune(tmp_path / "dask.sqlite", workload, _on_cluster(client, tables))
    assert all(o.outcome is not None for o in serial + clustered)
    assert len(_trials(tmp_path / "serial.sqlite")) >= TOTAL_TRIALS
    assert _trials(tmp_path / "serial.sqlite") == _trials(tmp_path / "dask.sqlite")
    assert [o.outcome.best for o in serial] == [o.outcome.best for o in clustered]


def test_a_worker_killed_mid_run_loses_no_trial(tables, workload, client, tmp_path):
    """SIGKILL one worker process while trials are in flight (each takes 20 ms): Dask reruns its tasks
    elsewhere, the run completes, and the database equals the serial run's."""
    serial = tmp_path / "serial.sqlite"
    _tune(serial, workload, _serial(tables))
    pids = client.run(os.getpid)
    killed = []

    def kill_one() -> None:
        time.sleep(1.5)
        address, pid = sorted(pids.items())[0]
        os.kill(pid, signal.SIGKILL)
        killed.append(address)

    killer = threading.Thread(target=kill_one)
    killer.start()
    started = time.monotonic()
    outcomes = _tune(tmp_path / "dask.sqlite", workload, _on_cluster(client, tables, delay_s=0.02))
    killer.join()
    assert killed and time.monotonic() - started > 1.5  # the kill landed while the run was going
    assert all(o.outcome is not None for o in outcomes)
    assert _trials(serial) == _trials(tmp_path / "dask.sqlite")


def test_tune_many_verb_on_a_local_cluster(tables, workload, tmp_path, capsys):
    pytest.importorskip("distributed")
    path = tmp_path / "workload.json"
    save_workload(Workload(workload.shapes[:4]), path)
    assert load_workload(path) == Workload(workload.shapes[:4])
    db = tmp_path / "verb.sqlite"
    args = [str(path), "--simulate", str(tables), "--family", "simt", "--trials", "48", "--db", str(db)]
    tasks = tmp_path / "tasks.jsonl"
    assert main(["tune-many", *args, "--workers", "2", "--task-log", str(tasks)]) == 0
    out = capsys.readouterr().out
    assert "local Dask cluster of 2 workers" in out and "workload GEMM time per model step" in out
    from gemmtune.tune.task_log import read_intervals

    intervals = read_intervals(tasks)  # every trial a task, named by its shape, on one of the 2 workers
    assert len([i for i in intervals if i.kind == "measure_on_worker"]) == len(_trials(db))
    assert {i.label for i in intervals if i.label} == {s.spec.short().replace(" ", "/") for s in workload.shapes[:4]}
    assert {i.worker for i in intervals} == {"worker-0", "worker-1"}
    assert "compute by kind: measure_on_worker" in out and "longest shapes" in out
    first = _trials(db)
    assert main(["tune-many", *args, "--task-log", str(tmp_path / "none.jsonl")]) == 0  # serial: nothing to record
    assert _trials(db) == first  # same budget: everything is in the database already
    assert "this run tunes in this process" in capsys.readouterr().err and not (tmp_path / "none.jsonl").exists()


def test_a_shape_without_a_table_is_reported_not_fatal(tables, tmp_path, capsys):
    path = tmp_path / "workload.json"
    save_workload(Workload((WorkloadShape(SHAPES[0]), WorkloadShape(GemmSpec(999, 999, 999)))), path)
    code = main(["tune-many", str(path), "--simulate", str(tables), "--family", "simt", "--trials", "20",
                 "--db", str(tmp_path / "x.sqlite")])
    assert code == 1
    assert "no simulation table for 999x999x999" in capsys.readouterr().out


def test_shapes_at_once_keep_the_workers_busy(tables, workload, client, tmp_path):
    """4 workers, trials of 50 ms, the same workload one shape at a time and 4 at a time: 4 at a time
    takes under 3/4 of the wall time (0.56-0.60 measured on a 2-core machine; one shape leaves the
    workers idle while its strategy picks the next batch), and the database equals a serial run's
    without transfer seeds (transfer is off when shapes overlap). Both runs share the machine's load,
    so the ratio holds where an absolute balance bar did not (workers' busy times 3-16% apart either way)."""
    no_transfer = OPTIONS.__class__(**{**OPTIONS.__dict__, "transfer": False})
    serial = tmp_path / "serial.sqlite"
    _tune(serial, workload, _serial(tables), no_transfer)
    walls = {}
    for at_once in (1, 4):
        started = time.monotonic()
        outcomes = _tune(tmp_path / f"dask{at_once}.sqlite", workload, _on_cluster(client, tables, delay_s=0.05),
                         no_transfer, at_once=at_once)
        walls[at_once] = time.monotonic() - started
        assert all(o.outcome is not None for o in outcomes)
    assert walls[4] < 0.75 * walls[1], walls
    assert _trials(serial) == _trials(tmp_path / "dask4.sqlite") == _trials(tmp_path / "dask1.sqlite")


def test_a_cluster_without_the_dask_extra_is_one_line_and_exit_2(tables, workload, tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # as if the dask extra were not installed
    path = tmp_path / "workload.json"
    save_workload(Workload(workload.shapes[:1]), path)
    args = ["tune-many", str(path), "--simulate", str(tables), "--family", "simt", "--trials", "8",
            "--db", str(tmp_path / "t.sqlite")]
    assert main([*args, "--workers", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gemmtune: ") and "pip install 'gemmtune[dask]'" in err and len(err.splitlines()) == 1
    assert main(args) == 0  # without a cluster the same verb runs the shapes one after another here


# --- the GPU recipe's path, with a fake compiler and evaluator (no NVRTC, no GPU) ---------------------
def timed_by_tile(job):
    """A fake evaluator: ok, a time that depends on the tile, and the measuring process's id; a PairedJob's
    kernels (tuner.compare_in_turn) 3 rounds each of the same times."""
    from gemmtune.tune.trial import Status
    from gemmtune.tune.worker import MeasureOutcome, PairedJob

    def seconds(one):
        return 1e-3 * (1 + one.config_json["bm"] / 1000 + one.config_json["bn"] / 3000)
    if isinstance(job, PairedJob):
        return MeasureOutcome(Status.OK, protocol={"pid": os.getpid()},
                              rounds_s=tuple((seconds(one),) * job.rounds for one in job.jobs))
    return MeasureOutcome(Status.OK, seconds(job), (seconds(job),), {"pid": os.getpid()})


@pytest.fixture(scope="module")
def gpu_client():
    """Two workers that declare a GPU, started as non-daemons (the pipeline measures in a child)."""
    distributed = pytest.importorskip("distributed")
    from gemmtune.tune.distributed import non_daemon_workers

    with non_daemon_workers():
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", resources={"GPU": 1})
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def test_gpu_recipe_compiles_as_its_own_task_and_measures_in_a_watched_child(gpu_client, tmp_path):
    import json

    import distributed

    from gemmtune.tune.distributed import GpuRecipe
    from test_tune_worker import ENV, fake_compile_all_fine

    def runner_for(spec, family):
        return DaskRunner(gpu_client, GpuRecipe(json.dumps(spec.to_json()), family, 10.0, fake_compile_all_fine,
                                                timed_by_tile, ENV))

    workload = Workload((WorkloadShape(SHAPES[0]), WorkloadShape(SHAPES[1])))
    with distributed.get_task_stream(gpu_client) as stream, TuningDB(tmp_path / "g.sqlite") as db:
        outcomes = tune_many(workload, runner_for, db, "sm_90", OPTIONS, total_trials=32, family="simt")
    assert all(o.outcome is not None and o.outcome.best is not None for o in outcomes)
    names = {task["key"].split("-")[0] for task in stream.data}
    assert {"compile_on_worker", "measure_compiled_on_worker", "time_in_turn_on_worker"} <= names, names
    with sqlite3.connect(tmp_path / "g.sqlite") as conn:  # the leaders, timed in turn: IN_TURN_ROUNDS rounds each
        kept = [json.loads(row[0]) for row in conn.execute("SELECT samples_json FROM trials WHERE phase = 'remeasure'")]
    assert kept and all(len(samples) == IN_TURN_ROUNDS for samples in kept)
    worker_pids = set(gpu_client.run(os.getpid).values())
    with sqlite3.connect(tmp_path / "g.sqlite") as conn:
        pids = {json.loads(row[0])["pid"] for row in conn.execute("SELECT protocol_json FROM trials WHERE status = 'ok'")}
    assert pids and not pids & worker_pids  # measured in the pipeline's watched child, not the worker itself


def test_a_trial_the_cluster_keeps_losing_stops_its_shape_in_one_line(tables, workload, tmp_path, capsys):
    """A task whose workers kept dying (Dask's KilledWorker) ends that shape with a one-line reason;
    the other shapes are tuned and every trial already back stays in the database."""
    distributed = pytest.importorskip("distributed")

    class Lost:
        def result(self):
            raise distributed.KilledWorker("measure_on_worker-1", "tcp://127.0.0.1:1", 3)

        def release(self):
            pass

    class Flaky:
        """Runs tasks here, but loses every one of the second shape's."""

        def scheduler_info(self):
            return {"workers": {}}

        def submit(self, fn, *args, **kwargs):
            recipe = args[0]
            if Path(recipe.path).name.endswith(f"_{SHAPES[1].m}x{SHAPES[1].n}x{SHAPES[1].k}.csv"):
                return Lost()
            value = fn(*args)
            return type("Done", (), {"result": lambda self: value, "release": lambda self: None})()

    shapes = Workload(workload.shapes[:2])
    with TuningDB(tmp_path / "f.sqlite") as db:
        outcomes = tune_many(shapes, lambda spec, family: DaskRunner(Flaky(), TableRecipe(str(table_path(family, spec, tables)))),
                             db, "sm_90", OPTIONS, total_trials=40, family="simt")
    lost = [o for o in outcomes if o.outcome is None]
    assert len(lost) == 1 and lost[0].budget.shape.spec == SHAPES[1]
    assert lost[0].error.startswith("the cluster lost every worker that ran") and "\n" not in lost[0].error
    assert [o for o in outcomes if o.outcome is not None][0].outcome.new_trials > 0


# --- two workers sharing one GPU: the lock log says whether timed sections overlapped ----------------
def locked_by_tile(job):
    """timed_by_tile inside the GPU lock of one (fake) GPU, as the real evaluator holds it."""
    from gemmtune.gpu_lock import gpu_lock

    with gpu_lock("GPU-shared-fake"):
        time.sleep(0.004)
    return timed_by_tile(job)


def test_two_workers_on_one_gpu_never_overlap_and_the_log_names_each_worker(tmp_path, monkeypatch, capsys):
    """Two GPU workers, two shapes at once: every timed section is logged under its worker's name
    (taken by the measuring child from the worker), none overlaps another, both workers were busy,
    and each worker measured every shape in one shared child."""
    import json

    distributed = pytest.importorskip("distributed")
    from gemmtune.cli.many_cmds import report_lock_log, start_lock_log
    from gemmtune.gpu_lock import lock_report, read_intervals
    from gemmtune.tune.distributed import GpuRecipe, non_daemon_workers
    from test_tune_worker import ENV, fake_compile_all_fine

    monkeypatch.setenv("GEMMTUNE_LOCK_DIR", str(tmp_path / "locks"))
    log = tmp_path / "lock.log"
    monkeypatch.delenv("GEMMTUNE_LOCK_LOG", raising=False)  # so that the test's end removes what start_lock_log sets
    start_lock_log(log)  # before the cluster starts: the workers inherit it
    with non_daemon_workers():
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", resources={"GPU": 1})
    workload = Workload(tuple(WorkloadShape(spec) for spec in SHAPES[:4]))
    with cluster, distributed.Client(cluster) as client, TuningDB(tmp_path / "l.sqlite") as db:
        def runner_for(spec, family):
            return DaskRunner(client, GpuRecipe(json.dumps(spec.to_json()), family, 10.0, fake_compile_all_fine,
                                                locked_by_tile, ENV))

        outcomes = tune_many(workload, runner_for, db, "sm_90", OPTIONS, total_trials=64, family="simt",
                             shapes_at_once=2)
        worker_names = {f"worker-{w['name']}" for w in client.scheduler_info()["workers"].values()}
    assert all(o.outcome is not None for o in outcomes)
    report = lock_report(read_intervals(log))
    assert report.overlapping_pairs == 0 and set(report.busy_s) == worker_names
    assert report.sections >= 64 and min(report.counts.values()) > 0
    with sqlite3.connect(tmp_path / "l.sqlite") as conn:
        pids = {json.loads(row[0])["pid"] for row in conn.execute("SELECT protocol_json FROM trials WHERE status = 'ok'")}
    assert len(pids) == 2  # one measuring child per worker for all four shapes
    assert report_lock_log(log, console_for_test())
    assert "0 overlapping pairs" in capsys.readouterr().out


def test_overlapping_sections_fail_the_check_in_one_line(tmp_path, capsys):
    from gemmtune.cli.many_cmds import report_lock_log

    log = tmp_path / "lock.log"
    log.write_text("10 0.0 1.0 worker-0\n11 0.5 1.5 worker-1\n")
    assert not report_lock_log(log, console_for_test())
    captured = capsys.readouterr()
    assert "1 overlapping pairs" in captured.out
    assert captured.err.strip() == f"gemmtune: 1 pairs of timed sections overlapped (see {log})"


def console_for_test():
    from rich.console import Console

    return Console(width=200)


def test_an_interrupt_drops_the_shapes_not_started(tables, workload, tmp_path):
    """SIGINT while shapes are tuned two at a time: tune_many stops waiting at once and the shapes
    not started are never tuned (a `with ThreadPoolExecutor` would tune all twelve before the stop
    got through); the shapes already done were reported to on_done."""
    from gemmtune.lifeline import Interrupted, stop_signals

    done: list = []
    signalled: list = []

    def on_done(outcome) -> None:  # the stop comes as the first shape ends (not at a set time: a
        done.append(outcome)        # loaded machine may not have finished one by then)
        if not signalled:
            signalled.append(time.monotonic())
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()

    with pytest.raises(Interrupted), stop_signals(), TuningDB(tmp_path / "i.sqlite") as db:
        tune_many(workload, _serial(tables, delay_s=0.05), db, "sm_90", OPTIONS, total_trials=TOTAL_TRIALS,
                  family="simt", shapes_at_once=2, on_done=on_done)
    assert time.monotonic() - signalled[0] < 3.0
    time.sleep(3.0)  # the two shapes running when the stop came end on their own
    assert 0 < len(done) <= 3 and len(done) < len(workload.shapes)


def test_the_workload_time_line_sums_count_times_time_and_compares_with_cublas():
    from types import SimpleNamespace

    from gemmtune.cli.many_cmds import workload_time_line

    def shape(count, untuned, tuned):
        return SimpleNamespace(budget=SimpleNamespace(shape=SimpleNamespace(count=count)), untuned_s=untuned,
                               tuned_s=tuned)

    outcomes = [shape(2, 4e-3, 2e-3), shape(1, 2e-3, 1e-3)]
    assert workload_time_line(outcomes, [3e-3, 1e-3], 2) == (
        "workload GEMM time per model step (Σ count × time): untuned 10.000 ms, tuned 5.000 ms, cuBLAS 7.000 ms; "
        "× cuBLAS untuned 0.70, tuned 1.40")
    partial = workload_time_line(outcomes[:1] + [shape(1, None, None)], [3e-3, None], 3)
    assert partial.startswith("workload GEMM time per model step (Σ count × time) (over the 1 of 3 shapes tuned): "
                              "untuned 8.000 ms, tuned 4.000 ms, cuBLAS 6.000 ms")
    assert workload_time_line([shape(1, 2e-3, 1e-3)], [None], 1).endswith("tuned 1.000 ms, cuBLAS —")
    assert workload_time_line([shape(1, None, None)], [None], 1) == ""


def test_cublas_times_come_first_and_a_failing_baseline_is_one_line(workload, capsys):
    from gemmtune.cli.many_cmds import cublas_times

    started = []

    def cublas_for(spec, family):
        """Starts the baseline, returns its wait: every shape is started before any is waited for."""
        started.append(spec)

        def wait():
            assert len(started) == 4
            if spec == SHAPES[1]:
                raise RuntimeError("CUDA out of memory.\nTried to allocate ...")
            if spec == SHAPES[2]:
                raise SpecError("a shape this family refuses")  # its own line comes when it is tuned
            return spec.m * 1e-9
        return wait

    from gemmtune.errors import SpecError

    shapes = Workload(workload.shapes[:4])
    assert cublas_times(shapes, cublas_for, "sm_90", "simt") == {SHAPES[0]: 512e-9, SHAPES[1]: None,
                                                                 SHAPES[2]: None, SHAPES[3]: 4096e-9}
    assert capsys.readouterr().err == (f"gemmtune: no cuBLAS time for {SHAPES[1].short()}: RuntimeError: "
                                       "CUDA out of memory.\n")


def test_local_workers_leave_ctrl_c_to_the_client():
    """Workers of the cluster tune-many starts ignore SIGINT (the client stops the run and closes the
    cluster; before, each worker printed a KeyboardInterrupt traceback), and the client's own handler
    is back once the cluster is up."""
    import signal

    pytest.importorskip("distributed")
    from gemmtune.tune.distributed import dask_client

    before = signal.getsignal(signal.SIGINT)
    client = dask_client(None, 1)
    try:
        handlers = client.run(lambda: str(signal.getsignal(signal.SIGINT)))
        assert handlers and all(h == str(signal.SIG_IGN) for h in handlers.values()), handlers
        assert signal.getsignal(signal.SIGINT) == before
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()


def test_workers_spread_round_robin_over_the_gpus():
    from gemmtune.tune.distributed import pinned_gpus

    assert pinned_gpus(4, ["0", "1"]) == ["0", "1", "0", "1"]
    assert pinned_gpus(3, ["2", "3"]) == ["2", "3", "2"]
    assert pinned_gpus(2, []) == [None, None]


def test_each_local_worker_sees_only_its_gpu():
    """The local cluster pins each worker through CUDA_VISIBLE_DEVICES (read inside the worker
    processes) and declares GPU=1 on the pinned ones, so measurements go only there."""
    pytest.importorskip("distributed")
    from gemmtune.tune.distributed import workers_declare_gpus, dask_client

    client = dask_client(None, 3, ["3", "5"])
    try:
        seen = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
        names = {address: info["name"] for address, info in client.scheduler_info()["workers"].items()}
        assert {names[address]: pin for address, pin in seen.items()} == {0: "3", 1: "5", 2: "3"}
        assert workers_declare_gpus(client)
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()


@pytest.mark.parametrize("value, gpus", [("2,3", ["2", "3"]), ("0,-1,1", ["0"]), ("", []),
                                         ("GPU-1a2b,GPU-3c4d", ["GPU-1a2b", "GPU-3c4d"])])
def test_visible_gpus_follow_cuda_visible_devices(monkeypatch, value, gpus):
    from gemmtune.device import visible_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert visible_gpus() == gpus


def test_default_workers_one_per_gpu_when_several(monkeypatch):
    pytest.importorskip("distributed")
    from gemmtune.cli.many_cmds import cluster_line, local_workers

    assert local_workers(None, ["0", "1"]) == 2
    assert local_workers(None, ["0"]) == 1
    assert local_workers(None, []) == 1
    assert local_workers(4, ["0", "1"]) == 4
    assert cluster_line(4, ["0", "1"]).endswith("on 2 GPUs (CUDA_VISIBLE_DEVICES 0,1, 2 per GPU)")


def test_zero_workers_is_one_line_and_exit_2(tables, workload, tmp_path, capsys):
    path = tmp_path / "w.json"
    save_workload(workload, path)
    assert main(["tune-many", str(path), "--workers", "0", "--simulate", str(tables),
                 "--db", str(tmp_path / "db.sqlite")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gemmtune: --workers must be 1 or more, not 0"], err


def test_every_task_of_a_runner_carries_its_shape_priority(workload, tables):
    """tune-many ranks shapes by share on the cluster: each task a DaskRunner submits (compile and
    measure alike) carries the runner's priority, so Dask gives free workers to the largest shape."""
    submitted = []

    class Recording:
        def scheduler_info(self):
            return {"workers": {}}

        def submit(self, fn, *args, **kwargs):
            submitted.append((fn.__name__, kwargs.get("priority")))
            value = fn(*args)
            return type("Done", (), {"result": lambda self: value, "release": lambda self: None})()

    spec = SHAPES[0]
    runner = DaskRunner(Recording(), TableRecipe(str(table_path("simt", spec, tables))), priority=399000)
    configs = sorted(runner.prototype.table.rows)[:3]
    assert len(list(runner.run(configs))) == 3
    assert submitted == [("measure_on_worker", 399000)] * 3


def test_the_task_log_summary_says_where_the_time_went(tmp_path):
    from gemmtune.tune.task_log import TaskInterval, read_intervals, summary_lines, task_key, write_intervals

    from dask.utils import key_split

    key = task_key("compile_on_worker", "8192x14336x4096/nt/bf16", "0f3a9c")
    assert key_split(key) == "compile_on_worker"  # Dask's grouping by function is kept
    assert TaskInterval.from_key("worker-0", key, 0.0, 1.0) == TaskInterval(
        "worker-0", "compile_on_worker", "8192x14336x4096/nt/bf16", 0.0, 1.0)
    assert TaskInterval.from_key("worker-1", "cublas_on_worker-5f3e", 0.0, 1.0).kind == "cublas_on_worker"
    intervals = [TaskInterval("worker-0", "compile_on_worker", "big", 100.0, 101.0),
                 TaskInterval("worker-0", "measure_compiled_on_worker", "big", 101.0, 101.5),
                 TaskInterval("worker-1", "compile_on_worker", "small", 100.0, 100.5),
                 TaskInterval("worker-1", "measure_compiled_on_worker", "big", 102.0, 104.0)]
    write_intervals(tmp_path / "t.jsonl", intervals)
    assert sorted(read_intervals(tmp_path / "t.jsonl"), key=lambda i: (i.start, i.worker)) == sorted(
        intervals, key=lambda i: (i.start, i.worker))
    assert summary_lines(intervals) == [
        "tasks: 4 over 4.0 s",
        "compute by kind: compile_on_worker 2 × 0.75 s = 1.5 s; measure_compiled_on_worker 2 × 1.25 s = 2.5 s",
        "computing per worker (share of the span): worker-0 38%, worker-1 62%",
        "longest shapes (first task start to last task end): big 4.0 s, small 0.5 s"]
    assert summary_lines([]) == ["tasks: none recorded"]


LOOKAHEAD = TuneOptions(**{**OPTIONS.__dict__, "lookahead": True})


def test_with_lookahead_the_cluster_still_leaves_the_serial_database(tables, workload, client, tmp_path):
    """--lookahead on a cluster: each shape's next round is submitted while this one runs; the
    strategy asks the same configs as a serial run with lookahead, so the database is the same, and
    no budget is overrun by prefetched trials."""
    serial, on_cluster = tmp_path / "serial.sqlite", tmp_path / "dask.sqlite"
    _tune(serial, Workload(workload.shapes[:4]), _serial(tables), LOOKAHEAD)
    outcomes = _tune(on_cluster, Workload(workload.shapes[:4]), _on_cluster(client, tables), LOOKAHEAD)
    assert all(o.outcome is not None for o in outcomes)
    assert all(o.outcome.trials <= o.budget.trials + 1 for o in outcomes)  # + the untuned pick, measured first
    assert _trials(serial) == _trials(on_cluster)


def test_lookahead_submits_the_next_round_before_waiting_on_this_one(tables):
    """The mechanism, step by step: with lookahead the runner submits round r+1 before it waits for
    any result of round r (a worker that frees up takes a queued trial of the shape instead of
    idling until the round's slowest trial is back); a prefetched trial nobody asked for is
    cancelled when the shape ends."""
    from gemmtune.tune.tuner import tune

    events = []

    class Recording:
        def scheduler_info(self):
            return {"workers": {}}

        def submit(self, fn, *args, **kwargs):
            number = len([e for e in events if e[0] == "submit"])
            events.append(("submit", number, kwargs["priority"]))
            value = fn(*args)

            class Done:
                def result(self):
                    events.append(("result", number))
                    return value

                def release(self):
                    pass

                def cancel(self):
                    events.append(("cancel", number))
            return Done()

    spec = SHAPES[0]
    runner = DaskRunner(Recording(), TableRecipe(str(table_path("simt", spec, tables))), priority=50)
    options = TuneOptions(**{**LOOKAHEAD.__dict__, "trials": 12, "batch": 4, "chooser_seeds": 0, "transfer": False,
                             "remeasure_top": 0})
    with TuningDB(":memory:") as db:
        tune(spec, runner, db, options)
    submits = [e for e in events if e[0] == "submit"]
    first_result = events.index(next(e for e in events if e[0] == "result"))
    assert len([e for e in events[:first_result] if e[0] == "submit"]) == 8  # rounds 1 and 2 in flight
    assert [e[2] for e in submits[:8]] == [49] * 4 + [50] * 4  # round 2 prefetched (one below), round 1 asked
    assert len(submits) == 12 and not runner.ahead  # within the budget, every prefetched trial was asked for
    runner.prefetch(sorted(runner.prototype.table.rows)[-2:])  # as when a time budget ends with a round queued
    runner.close()
    assert [e for e in events if e[0] == "cancel"] == [("cancel", 12), ("cancel", 13)] and not runner.ahead
