"""The kernel_tuner peer (bench/peers/): the simt space said in kernel_tuner's terms is gemmtune's own.

The translation and the comparison's bookkeeping need only gemmtune; the checks through kernel_tuner's
own machinery (its search-space solver, code-generator call, grid rule, argument check, simulation
mode) skip cleanly without the `peer` extra.
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from gemmtune.spec import GemmSpec
from gemmtune.tune.space import candidate_set, verdict

PEERS = Path(__file__).resolve().parents[1] / "bench" / "peers"
ARCH = "sm_90"
SHAPES = [GemmSpec(1024, 1024, 1024), GemmSpec(3000, 5000, 1504), GemmSpec(100, 70, 9)]


def _load(name: str):
    if str(PEERS) not in sys.path:
        sys.path.insert(0, str(PEERS))  # kernel_tuner_peer imports kt_space by name, as the script does
    spec = importlib.util.spec_from_file_location(name, PEERS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


kt_space = _load("kt_space")
peer_script = _load("kernel_tuner_peer")


def _sample(spec: GemmSpec, count: int = 60, seed: int = 0) -> list:
    candidates = candidate_set(kt_space.peer_space(spec, ARCH).space, spec, ARCH)
    rng = np.random.default_rng(seed)
    return candidates.configs(rng.choice(len(candidates), size=count, replace=False))


# --- the translation, gemmtune only ---------------------------------------------------------------
def test_parameters_are_the_tuned_domains_plus_the_block_size():
    peer = kt_space.peer_space(SHAPES[0], ARCH)
    tuned = {p.name: list(p.domain) for p in peer.space.params if len(p.domain) > 1}
    assert peer.tune_params == {**tuned, kt_space.BLOCK: list(kt_space.THREAD_COUNTS)}
    assert set(peer.fixed) | set(tuned) == set(peer.space.names)
    assert peer.fixed["kind"] == "tiled" and peer.fixed["split_k"] == 1


@pytest.mark.parametrize("spec", SHAPES, ids=lambda s: s.short())
def test_config_round_trip_and_block_size(spec):
    peer = kt_space.peer_space(spec, ARCH)
    for config in _sample(spec):
        params = peer.params_of(config)
        assert peer.config_of(params) == config
        assert params[kt_space.BLOCK] in kt_space.THREAD_COUNTS
        assert peer.valid(params)
        assert not peer.valid({**params, kt_space.BLOCK: 2048 // params[kt_space.BLOCK]})  # the tie holds


@pytest.mark.parametrize("spec", SHAPES[:2], ids=lambda s: s.short())
def test_footprint_checks_agree_with_gemmtune_on_random_combinations(spec):
    """Every restriction passing <=> gemmtune's verdict is None (and the block size is the thread count),
    on raw combinations drawn from the whole grid (mostly invalid ones) and on valid ones."""
    peer = kt_space.peer_space(spec, ARCH)
    checks = peer.rule_checks()
    names = list(peer.tune_params)
    rng = np.random.default_rng(1)
    raw = [{n: d[rng.integers(len(d))] for n, d in peer.tune_params.items()} for _ in range(3000)]
    raw += [peer.params_of(c) for c in _sample(spec, 200)]
    for params in raw:
        config = peer.config_of(params)
        expected = verdict(peer.space, config, spec, ARCH) is None and params[kt_space.BLOCK] == config.threads
        assert all(accept(*(params[n] for n in reads)) for _, reads, accept in checks) == expected, params
        assert peer.valid(params) == expected
    assert set(names) >= {n for _, reads, _ in checks for n in reads}


@pytest.mark.parametrize("spec", SHAPES, ids=lambda s: s.short())
def test_grid_and_code_are_what_gemmtune_launches(spec):
    peer = kt_space.peer_space(spec, ARCH)
    divisors = peer.grid_div
    for config in _sample(spec, 40):
        params = peer.params_of(config)
        source = kt_space.get_family("simt").render(spec, config, ARCH)
        size = peer.problem_size
        grid = (math.ceil(size[0] / params[divisors["grid_div_x"][0]]),
                math.ceil(size[1] / params[divisors["grid_div_y"][0]]), math.ceil(size[2] / divisors["grid_div_z"]))
        assert grid == source.grid
        assert (params[kt_space.BLOCK], 1, 1) == source.block
        assert peer.kernel_source(params) == source.code
        assert source.dynamic_smem == 0 and source.args == ("A", "B", "D")
        assert f"{peer.kernel_name}(" in source.code


# --- the comparison's bookkeeping -------------------------------------------------------------------
def _trial(at, config, own):
    return peer_script.Trial(at, config, own, "ok" if own else "verify_error")


def test_incumbents_cutoff_and_time_to_two_percent():
    a, b, c, d = _sample(SHAPES[0], 4)
    trials = [_trial(1.0, a, 3e-4), _trial(2.0, b, None), _trial(3.0, c, 2e-4), _trial(9.0, d, 1e-4)]
    chain = peer_script.incumbents(trials)
    assert [t.config for t in chain] == [a, c, d]
    assert [t.config for t in peer_script.incumbents(trials, cutoff_s=5.0)] == [a, c]
    common = {peer_script.key(a): 3.1e-4, peer_script.key(c): 1.0e-4, peer_script.key(d): 0.99e-4}
    assert peer_script.first_within(chain, common, 1.0e-4) == 3.0  # c is within 2% on the common clock
    assert peer_script.first_within(chain, common, 0.5e-4) is None
    assert peer_script.own_within(chain) == 9.0
    assert peer_script.to_retime(trials, near=0.05, limit=6) == [d]
    assert peer_script.to_retime(trials, near=3.0, limit=2) == [d, c]
    assert peer_script.to_retime(trials, near=0.05, limit=6, cutoff_s=5.0) == [c]  # the best by the cut-off


def test_summary_and_table_on_one_clock(tmp_path):
    a, b, c = _sample(SHAPES[0], 3)
    spec = SHAPES[0]
    runs = {"gemmtune": ({"wall_s": 40.0, "exit": 0}, [_trial(5.0, a, 2e-4), _trial(20.0, b, 1.5e-4)]),
            "kernel_tuner": ({"wall_s": 31.0, "exit": 0}, [_trial(8.0, c, 1.2e-4), _trial(35.0, a, 1e-5)])}
    retime = {"device": "test GPU", "arch": ARCH,
              "configs": {peer_script.key(x): {"flush": {"median_s": s}, "warm": {"median_s": s * 0.9}}
                          for x, s in ((a, 2.1e-4), (b, 1.50e-4), (c, 1.52e-4))},
              "cublas": {"flush": {"median_s": 1e-4}, "warm": {"median_s": 0.9e-4}}}
    summary = peer_script.summarize_shape(spec, 30.0, runs, retime)
    g, k = summary["tuners"]["gemmtune"], summary["tuners"]["kernel_tuner"]
    assert summary["best_of_both_us"] == pytest.approx(150.0)
    assert g["best_us"] == pytest.approx(150.0) and k["best_us"] == pytest.approx(152.0)
    assert k["trials"] == 1 and g["trials"] == 2  # kernel_tuner's trial at 35 s is past the cut-off
    assert g["to_2pct_s"] == 20.0 and k["to_2pct_s"] == 8.0
    assert g["best_tflops"] == pytest.approx(spec.flops / 150e-6 / 1e12)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "summary.json").write_text(json.dumps(summary))
    text = peer_script.table(peer_script.write_outputs(tmp_path))
    assert "on 1 of 1 shapes" in text and (tmp_path / "table.md").exists()


def test_shape_words():
    assert peer_script.parse_shape("2048") == GemmSpec(2048, 2048, 2048)
    assert peer_script.parse_shape("3000x5000x1504", "nt") == GemmSpec(3000, 5000, 1504, layout="nt")
    with pytest.raises(Exception):
        peer_script.parse_shape("12x0x3")


# --- through kernel_tuner's own machinery (the peer extra) ------------------------------------------
@pytest.fixture(scope="module")
def kernel_tuner():
    return pytest.importorskip("kernel_tuner")


@pytest.mark.slow
def test_kernel_tuner_solver_builds_exactly_gemmtunes_valid_set(kernel_tuner):
    from kernel_tuner.searchspace import Searchspace

    spec = SHAPES[1]
    peer = kt_space.peer_space(spec, ARCH)
    built = Searchspace(peer.tune_params, peer.restrictions(), 1024)
    names = list(peer.tune_params)
    codes = np.sort([peer.space.code_of(peer.config_of(dict(zip(names, values)))) for values in built.list])
    assert np.array_equal(codes, candidate_set(peer.space, spec, ARCH).codes)


def test_kernel_tuner_generates_gemmtunes_text_grid_and_block(kernel_tuner):
    from kernel_tuner import util
    from kernel_tuner.core import KernelSource

    for spec in SHAPES:
        peer = kt_space.peer_space(spec, ARCH)
        source = KernelSource(peer.kernel_name, peer.kernel_source, "CUDA", {})
        grid_div = peer.grid_div
        for config in _sample(spec, 25):
            params = peer.params_of(config)
            threads, grid = util.setup_block_and_grid(peer.problem_size, tuple(grid_div.values()), params,
                                                      util.default_block_size_names)
            name, text, _ = source.prepare_list_of_files(peer.kernel_name, params, grid, threads,
                                                         util.default_block_size_names)
            rendered = peer.render(params)
            assert (name, text, tuple(grid), tuple(threads)) == (peer.kernel_name, rendered.code, rendered.grid,
                                                                  rendered.block)
        arguments = [np.zeros(spec.a_shape, np.float32), np.zeros(spec.b_shape, np.float32),
                     np.zeros((spec.m, spec.n), np.float32)]
        util.check_argument_list(peer.kernel_name, rendered.code, arguments)  # raises on a mismatch


def test_kernel_tuner_simulation_mode_runs_the_peer_arguments(kernel_tuner, tmp_path):
    """tune_kernel with the peer's exact arguments (restrictions, generator, grid, defines={}) in
    kernel_tuner's simulation mode, replaying a small synthetic cache: the arguments are accepted and
    every config the strategy visits is one gemmtune accepts."""
    import random

    spec = GemmSpec(512, 512, 512)
    peer = kt_space.peer_space(spec, ARCH)
    configs = _sample(spec, 200, seed=3)
    cache = _synthetic_cache(peer, configs, tmp_path / "cache.json")
    member = {tuple(peer.params_of(c).values()) for c in configs}

    class InTable(type(peer.restrictions()[0])):  # the footprint constraint over every parameter
        pass

    restrictions = peer.restrictions() + [InTable("in_table", tuple(peer.tune_params), lambda *v: v in member)]
    # tune_kernel's `seed` is unused in 1.5.0; the GA draws from `random`. A small population: on a
    # sparse space the GA can loop for long looking for new valid children to fill a large one.
    random.seed(0)
    arguments = [np.zeros(spec.a_shape, np.float32), np.zeros(spec.b_shape, np.float32),
                 np.zeros((spec.m, spec.n), np.float32)]
    results, env = kernel_tuner.tune_kernel(
        peer.kernel_name, peer.kernel_source, peer.problem_size, arguments, peer.tune_params, **peer.grid_div,
        restrictions=restrictions, lang="CUDA", defines={}, compiler_options=["--std=c++17"],
        strategy="genetic_algorithm", strategy_options={"max_fevals": 20, "popsize": 6}, cache=str(cache),
        simulation_mode=True, quiet=True, seed=0)
    visited = [r for r in results if r]
    assert visited and all(peer.valid(r) for r in visited)
    best = min(visited, key=lambda r: r["time"])
    assert peer.config_of(best) in configs


def _synthetic_cache(peer, configs, path: Path) -> Path:
    """A kernel_tuner cache file holding `configs` with made-up times (all timings present)."""
    names = list(peer.tune_params)
    entries = {}
    for index, config in enumerate(configs):
        params = peer.params_of(config)
        entries[",".join(str(params[n]) for n in names)] = {
            **params, "time": 0.1 + 0.01 * index, "times": [0.1 + 0.01 * index], "compile_time": 100.0,
            "verification_time": 1.0, "benchmark_time": 1.0, "strategy_time": 0, "framework_time": 0,
            "timestamp": "2026-11-25 00:00:00+00:00"}
    data = {"device_name": "simulated", "kernel_name": peer.kernel_name, "problem_size": list(peer.problem_size),
            "tune_params_keys": names, "tune_params": peer.tune_params, "objective": "time", "cache": entries}
    path.write_text(json.dumps(data))
    return path


def test_script_help_runs_without_a_gpu():
    with pytest.raises(SystemExit) as exit_info:
        peer_script.parse_args(["--help"])
    assert exit_info.value.code == 0
    assert list(itertools.islice(peer_script.parse_args([]).shapes, 1)) == [GemmSpec(1024, 1024, 1024)]


def test_kernel_tuners_nvrtc_call_compiles_the_generated_text(kernel_tuner):
    """The NVCUDA backend's compile, short of loading the module (which needs a GPU): its options
    (--std=c++17 as the peer passes, compute_XX for sm_90), the kernel name as a name expression, and
    the lowered name it then looks up."""
    from cuda.bindings import nvrtc
    from kernel_tuner.utils.nvcuda import to_valid_nvrtc_gpu_arch_cc

    spec = SHAPES[1]
    peer = kt_space.peer_space(spec, ARCH)
    params = peer.params_of(_sample(spec, 1, seed=5)[0])
    name = peer.kernel_name.encode()
    err, program = nvrtc.nvrtcCreateProgram(peer.kernel_source(params).encode(), b"CUDAProgram", 0, [], [])
    try:
        assert int(err) == 0 and int(nvrtc.nvrtcAddNameExpression(program, name)[0]) == 0
        options = [b"--std=c++17", f"--gpu-architecture=compute_{to_valid_nvrtc_gpu_arch_cc('90')}".encode()]
        assert int(nvrtc.nvrtcCompileProgram(program, len(options), options)[0]) == 0
        err, lowered = nvrtc.nvrtcGetLoweredName(program, name)
        assert int(err) == 0 and lowered == name  # extern "C": the entry keeps its name
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def test_run_shape_plumbing_with_stand_in_children(tmp_path, monkeypatch):
    """run_shape end to end with the three GPU children replaced: gemmtune's database, kernel_tuner's
    kt.json (its timestamp format) and the re-timing file are read back into one summary."""
    import datetime

    from gemmtune.tune.db import TuningDB
    from gemmtune.tune.trial import Environment, Status, TrialResult, TuneContext

    spec = GemmSpec(512, 512, 512)
    g_configs, k_configs = _sample(spec, 3, seed=7), _sample(spec, 3, seed=8)
    peer = kt_space.peer_space(spec, ARCH)

    def child(command, log, timeout_s):
        folder = Path(command[command.index("--out") + 1]) if "--out" in command else None
        if "gemmtune.cli" in command:
            context = TuneContext(spec, Environment("stand-in", "9.0", 132, ARCH, "13.0", "13.0"), "simt", "3")
            with TuningDB(command[command.index("--db") + 1]) as db:
                for index, config in enumerate(g_configs):
                    db.record(context, TrialResult(config, Status.OK, 3e-4 - 1e-4 * index))
        elif command[command.index("--worker") + 1] == "kt":
            now = str(datetime.datetime.now(datetime.timezone.utc))
            rows = [peer_script._kt_row(peer, {**peer.params_of(c), "time": 0.25 - 0.05 * i, "timestamp": now})
                    for i, c in enumerate(k_configs)]
            (folder / "kt.json").write_text(json.dumps({"strategy": "stand-in", "results": rows}))
        else:
            wanted = json.loads((folder / "to_retime.json").read_text())
            times = {json.dumps(c, sort_keys=True): {"flush": {"median_s": 1e-4}, "warm": {"median_s": 1e-4}}
                     for c in wanted}
            (folder / "retime.json").write_text(json.dumps({"configs": times, "cublas": {}}))
        return 0

    monkeypatch.setattr(peer_script, "_child", child)
    args = peer_script.parse_args(["512", "--time", "60", "--out", str(tmp_path)])
    summary = peer_script.run_shape(spec, args, 1)
    g, k = summary["tuners"]["gemmtune"], summary["tuners"]["kernel_tuner"]
    assert (g["trials"], k["trials"]) == (3, 3) and g["ok"] == 3
    assert g["own_best_us"] == pytest.approx(100.0) and k["own_best_us"] == pytest.approx(150.0)
    assert g["best_us"] == pytest.approx(100.0) == k["best_us"]
    assert summary["retimed"] == 2  # each tuner's last incumbent (the others are > 5% slower on its own clock)
    assert (tmp_path / "512x512x512_nn" / "summary.json").exists()
