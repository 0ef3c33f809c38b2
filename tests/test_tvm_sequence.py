"""Ladder prefixes before epilogue_fusion emit two kernels (GEMM into `acc`, then ReLU + C): they are
built, compiled and (on a GPU) verified and timed as one launch sequence."""
from __future__ import annotations

import ctypes
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("tvm")
pytestmark = pytest.mark.tvm

import tvm

from gemmtune.errors import ConfigError, SpecError
from gemmtune.spec import GemmSpec
from gemmtune.runtime import pack_arguments
from gemmtune.timing import TimingProtocol
from gemmtune.tvm import ladder
from gemmtune.tvm.convert import TvmBuild, TvmKernel, build_cuda
from gemmtune.tvm.rows import COMPILED, ladder_rows, schedule_row
from gemmtune.tvm.sequence import (
    Intermediate,
    compile_sequence,
    entry_log,
    evaluate_sequence,
    intermediate_sizes,
    launch_sequence,
    to_sequence,
)
from gemmtune.tvm.target import cuda_target

UNFUSED = ladder.RUNG_NAMES[:-1]  # every prefix before epilogue_fusion
# Shapes every prefix's tiles fit (multiples of 128 × 128 × 32), square-free and in two layouts.
TILED = [(128, 256, 32, "nn"), (256, 128, 64, "tn")]
# Shapes only the naive row takes (the tiled rows reject them with a reason).
RAGGED = [(64, 48, 32, "nn"), (100, 36, 20, "nn"), (37, 29, 11, "nt")]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nvrtc")


def _spec(m: int, n: int, k: int, layout: str) -> GemmSpec:
    return GemmSpec(m, n, k, layout, epilogue="relu+add")


def _sequence(spec: GemmSpec, rung: str):
    return launch_sequence(ladder.schedule_rung(spec, rung).mod, spec, {"step": rung})


def _cases() -> list[tuple[str, tuple]]:
    return [(rung, shape) for rung in UNFUSED for shape in TILED] + [("naive", shape) for shape in RAGGED]


# --- CPU: build and compile -----------------------------------------------------------------------
@pytest.mark.parametrize(("rung", "shape"), _cases())
def test_every_unfused_prefix_is_a_two_kernel_sequence_that_compiles(rung: str, shape: tuple, cache: Path) -> None:
    spec = _spec(*shape)
    seq = _sequence(spec, rung)
    gemm, epilogue = seq.kernels
    assert set(gemm.params) == {"A", "B", "acc"} and set(epilogue.params) == {"acc", "C", "D"}
    assert seq.intermediates == (Intermediate("acc", spec.m * spec.n * 4),)
    assert seq.describe() == "2 kernels: (A,B)→acc, (C,acc)→D"
    assert math.prod(epilogue.grid) * math.prod(epilogue.block) >= spec.m * spec.n
    assert "#include" not in seq.code
    assert all(re.search(rf"void __launch_bounds__\(\d+\) {k.entry}\([^)]*\) {{", seq.code) for k in seq.kernels)
    compiled = compile_sequence(seq, "sm_90", cache)
    assert len(compiled.resources) == 2 and all(r.spills == 0 for r in compiled.resources)
    assert compiled.kernel(0).source.entry == gemm.entry and compiled.kernel(1).source.grid == epilogue.grid


@pytest.mark.parametrize("rung", UNFUSED)
def test_kernel_names_give_the_launch_order_of_tvms_host_code(rung: str) -> None:
    from tvm.tirx.build import split_host_device_mods

    from gemmtune.tvm.convert import _renamed

    spec = _spec(*TILED[0])
    mod, symbol = ladder.schedule_rung(spec, rung).mod, f"{spec.slug()}_tvm"
    target = cuda_target("sm_90")
    pipeline, _, _ = tvm.tirx.get_default_tir_pipeline(target)
    host, _ = split_host_device_mods(pipeline(tvm.tirx.transform.BindTarget(target)(_renamed(mod, symbol))))
    launched = re.findall(r'call_ffi_kernel\("([^"]+)"', host.script())
    assert launched == [k.entry for k in launch_sequence(mod, spec, {}).kernels]


def test_launch_order_does_not_depend_on_the_order_tvm_lists_kernels() -> None:
    spec = _spec(*TILED[0])
    mod = ladder.schedule_rung(spec, "naive").mod
    built = build_cuda(mod, "sm_90", symbol="s_tvm")
    shuffled = replace(built, kernels=tuple(reversed(built.kernels)))
    entries = [k.entry for k in to_sequence(shuffled, spec, intermediate_sizes(mod), {}).kernels]
    assert entries == ["s_tvm_kernel", "s_tvm_kernel_1"]


def test_intermediates_are_sized_from_the_scheduled_function() -> None:
    spec = _spec(100, 36, 20, "nn")
    assert intermediate_sizes(ladder.schedule_rung(spec, "naive").mod) == {"acc": 100 * 36 * 4}
    fused = _spec(*TILED[0])
    assert intermediate_sizes(ladder.schedule_rung(fused, "epilogue_fusion").mod) == {}  # acc lives in registers


def _fake_build(second_params: tuple[str, ...]) -> TvmBuild:
    def kernel(entry: str, params: tuple[str, ...]) -> tuple[str, TvmKernel]:
        declared = ", ".join(f"float* __restrict__ {p}_ptr" for p in params)
        return (f'extern "C" __global__ void {entry}({declared}) {{ }}\n',
                TvmKernel(entry, params, (1, 1, 1), (32, 1, 1)))

    first_text, first = kernel("f_kernel", ("A", "B", "tmp"))
    second_text, second = kernel("f_kernel_1", second_params)
    return TvmBuild(first_text + second_text, (first, second), "sm_90")


def test_an_unknown_intermediate_is_refused_not_guessed() -> None:
    spec = _spec(64, 48, 32, "nn")
    with pytest.raises(ConfigError, match="'tmp'.*cannot size it"):
        to_sequence(_fake_build(("tmp", "C", "D")), spec, {"acc": 64 * 48 * 4}, {})
    built = build_cuda(ladder.schedule_rung(spec, "naive").mod, "sm_90")
    with pytest.raises(ConfigError, match="'acc'.*cannot size it"):
        to_sequence(built, spec, {}, {})


def test_a_sequence_must_take_every_operand() -> None:
    with pytest.raises(ConfigError, match=r"no kernel of the sequence takes \['C'\]"):
        to_sequence(_fake_build(("tmp", "D")), _spec(64, 48, 32, "nn"), {"tmp": 4}, {})


def test_entry_log_keeps_one_kernel_apart_from_a_name_it_prefixes() -> None:
    log = "\n".join(["ptxas info    : Compiling entry function 's_kernel_1' for 'sm_90'",
                     "ptxas info    : Used 12 registers",
                     "ptxas info    : Compiling entry function 's_kernel' for 'sm_90'",
                     "ptxas info    : Used 93 registers"])
    assert "93" in entry_log(log, "s_kernel") and "12" not in entry_log(log, "s_kernel")
    assert "12" in entry_log(log, "s_kernel_1") and entry_log(log, "other") == ""


def test_parameters_are_packed_in_the_kernels_own_order() -> None:
    kernel = TvmKernel("k", ("C", "D", "acc"), (1, 1, 1), (1, 1, 1))
    packed = pack_arguments(kernel.params, {"acc": 0x3000, "C": 0x1000, "D": 0x2000}, kernel.entry)
    assert [v.value for v in packed.values] == [0x1000, 0x2000, 0x3000]
    slots = ctypes.cast(packed.pointers, ctypes.POINTER(ctypes.c_void_p))
    assert [ctypes.c_void_p.from_address(slots[i]).value for i in range(3)] == [0x1000, 0x2000, 0x3000]
    with pytest.raises(SpecError, match="'acc'"):
        pack_arguments(kernel.params, {"C": 0x1000, "D": 0x2000}, kernel.entry)


def test_ladder_rows_without_a_gpu_compile_sequences_and_the_fused_kernel() -> None:
    rows = ladder_rows(_spec(*TILED[0]), "sm_90", TimingProtocol(), on_gpu=False)
    assert [r.status for r in rows] == [COMPILED] * len(ladder.RUNG_NAMES)
    assert all("2 kernels: (A,B)→acc, (C,acc)→D" in r.config and "kernel 2:" in r.message for r in rows[:-1])
    assert "kernels" not in rows[-1].config and rows[-1].registers > 0


def test_schedule_row_keeps_single_kernel_schedules_on_the_kernel_source_path() -> None:
    plain = schedule_row(GemmSpec(*TILED[0][:3]), "naive", "sm_90", TimingProtocol(), on_gpu=False, label="TVM naive")
    assert plain.name == "TVM naive" and plain.status == COMPILED and "kernels" not in plain.config
    refused = schedule_row(_spec(100, 36, 20, "nn"), "write_cache", "sm_90", TimingProtocol(), on_gpu=False)
    assert refused.status == "ConfigError" and "do not fit" in refused.message


# --- the GPU path against a fake driver (tests/fake_driver.py): no GPU needed ---------------------
def _python_kernels(seq) -> dict:
    """Stand-ins for the sequence's two kernels, reading their arguments in each kernel's own order."""
    import numpy as np
    from fake_driver import device_array, param_pointer

    spec = seq.spec
    shapes = {"A": spec.a_shape, "B": spec.b_shape, "C": (spec.m, spec.n), "D": (spec.m, spec.n),
              "acc": (spec.m, spec.n)}
    gemm, epilogue = seq.kernels

    def arrays(kernel: TvmKernel, params: int) -> dict:
        return {name: device_array(param_pointer(params, i), shapes[name]) for i, name in enumerate(kernel.params)}

    def run_gemm(params: int) -> None:
        x = arrays(gemm, params)
        x["acc"][:] = x["A"] @ x["B"]

    def run_epilogue(params: int) -> None:
        x = arrays(epilogue, params)
        x["D"][:] = np.maximum(x["acc"], 0) + x["C"]

    return {gemm.entry: run_gemm, epilogue.entry: run_epilogue}


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch, cache: Path):
    """A compiled naive sequence and a fake driver that runs its kernels in Python."""
    import cuda.bindings
    from fake_driver import FakeDriver

    from gemmtune import device

    spec = _spec(64, 48, 32, "nn")
    compiled = compile_sequence(_sequence(spec, "naive"), "sm_90", cache)
    driver = FakeDriver(_python_kernels(compiled.sequence))
    monkeypatch.setattr(cuda.bindings, "driver", driver)
    caches = (device._init_driver, device._primary_context, device.query_device)
    for cached in caches:
        cached.cache_clear()
    yield compiled, driver
    for cached in caches:
        cached.cache_clear()


def _all_freed(driver) -> bool:
    return driver.memory == {} and driver.modules_alive == 0 and driver.events_alive == 0


def test_fake_gpu_sequence_is_verified_then_timed_as_a_whole(fake_gpu) -> None:
    import numpy as np

    compiled, driver = fake_gpu
    result = evaluate_sequence(compiled, QUICK_FAKE, np.random.default_rng(0))
    assert result.ok, result.verify.message
    reps = len(result.measurement.samples_s)
    assert driver.calls.count("memset") == reps  # one L2 flush per repetition of the whole sequence
    assert driver.calls.count("launch") == 2 * (1 + QUICK_FAKE.warmup + reps)
    assert _all_freed(driver)


def test_fake_gpu_sequence_out_of_order_is_wrong_and_not_timed(fake_gpu) -> None:
    import numpy as np

    compiled, driver = fake_gpu
    swapped = replace(compiled, sequence=replace(compiled.sequence, kernels=compiled.sequence.kernels[::-1]),
                      resources=compiled.resources[::-1])
    result = evaluate_sequence(swapped, QUICK_FAKE, np.random.default_rng(0))
    assert not result.ok and result.measurement is None and result.verify.nan_count > 0  # acc was poisoned
    assert driver.calls.count("launch") == 2 and _all_freed(driver)


def test_fake_gpu_fault_in_the_second_kernel_frees_everything(fake_gpu) -> None:
    import numpy as np

    from gemmtune.errors import LaunchError

    compiled, driver = fake_gpu
    driver.kernels[compiled.sequence.kernels[1].entry] = lambda params: setattr(
        driver, "pending_error", driver.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS)
    with pytest.raises(LaunchError, match="ILLEGAL_ADDRESS"):
        evaluate_sequence(compiled, QUICK_FAKE, np.random.default_rng(0))
    assert _all_freed(driver)


def test_fake_gpu_missing_second_entry_unloads_the_first(fake_gpu) -> None:
    from gemmtune.errors import LaunchError

    compiled, driver = fake_gpu
    del driver.kernels[compiled.sequence.kernels[1].entry]
    with pytest.raises(LaunchError, match="NOT_FOUND"):
        evaluate_sequence(compiled, QUICK_FAKE)
    assert _all_freed(driver)


def test_fake_gpu_bench_row_of_a_sequence(fake_gpu) -> None:
    from gemmtune.tvm.rows import bench_sequence

    compiled, _ = fake_gpu
    row = bench_sequence("naive", "tiles", compiled, QUICK_FAKE)
    assert row.status == "ok" and row.median_s > 0 and row.samples >= QUICK_FAKE.min_reps
    assert row.registers == max(r.registers for r in compiled.resources)


QUICK_FAKE = TimingProtocol(warmup=1, min_reps=3, max_reps=5, min_time_s=0.0)


# --- GPU: verified and timed as one sequence ------------------------------------------------------
def _arch() -> str:
    from gemmtune.build import target_arch

    return target_arch(None)


QUICK = TimingProtocol(warmup=1, min_reps=3, max_reps=20, min_time_s=0.02)


@pytest.mark.gpu
@pytest.mark.parametrize(("rung", "shape"), _cases())
def test_every_unfused_prefix_is_right_and_timed_on_the_gpu(rung: str, shape: tuple) -> None:
    import numpy as np

    spec = _spec(*shape)
    compiled = compile_sequence(launch_sequence(ladder.schedule_rung(spec, rung).mod, spec, {}, _arch()), _arch())
    result = evaluate_sequence(compiled, QUICK, rng=np.random.default_rng(7))
    assert result.ok, result.verify.message
    assert result.measurement is not None and result.measurement.median_s > 0
    assert all(np.isfinite(s) and s > 0 for s in result.measurement.samples_s)


@pytest.mark.gpu
def test_a_sequence_launched_out_of_order_fails_verification() -> None:
    import numpy as np

    spec = _spec(*TILED[0])
    compiled = compile_sequence(launch_sequence(ladder.schedule_rung(spec, "naive").mod, spec, {}, _arch()), _arch())
    swapped = replace(compiled, sequence=replace(compiled.sequence, kernels=compiled.sequence.kernels[::-1]),
                      resources=compiled.resources[::-1])
    result = evaluate_sequence(swapped, QUICK, rng=np.random.default_rng(1))
    assert not result.ok and result.measurement is None  # the epilogue read the NaN-poisoned acc first


@pytest.mark.gpu
def test_verify_only_does_not_time() -> None:
    spec = _spec(*RAGGED[1])
    compiled = compile_sequence(launch_sequence(ladder.schedule_rung(spec, "naive").mod, spec, {}, _arch()), _arch())
    result = evaluate_sequence(compiled, QUICK, verify_only=True)
    assert result.ok and result.measurement is None


@pytest.mark.gpu
def test_every_ladder_row_with_an_epilogue_is_ok_on_the_gpu() -> None:
    from gemmtune.cli import main

    spec = _spec(256, 256, 64, "nn")
    rows = ladder_rows(spec, _arch(), QUICK, on_gpu=True)
    assert [r.status for r in rows] == ["ok"] * len(ladder.RUNG_NAMES), [r.message for r in rows]
    assert all(r.tflops and r.tflops > 0 and r.samples > 0 for r in rows)
    assert all("2 kernels" in r.config for r in rows[:-1]) and "kernels" not in rows[-1].config
    assert main(["ladder", "--backend", "tvm", "M=256", "N=256", "K=64", "--epilogue", "relu+add",
                 "--min-time", "0.02"]) == 0
