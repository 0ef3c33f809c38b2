"""Grouped tuning and export on an sm_90a GPU (issue 69): a tiny tune-grouped run (3 candidates verified and timed
against torch._grouped_mm in the watched worker, stored, resumed), gemmtune.torch.grouped_mm then building the
tuned config, and the exported launcher run from its harness and through ctypes against torch._grouped_mm."""
from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from gemmtune.grouped import GroupedSpec, candidates, default_config
from gemmtune.tune.grouped_db import GroupedTuningDB
from gemmtune.tune.grouped_records import GroupedTrial
from gemmtune.tune.grouped_tuner import spec_for_rows, tune_grouped
from gemmtune.tune.trial import Status

pytestmark = pytest.mark.gpu
ROWS = (200, 0, 77, 300)


def _inputs(torch, spec: GroupedSpec, rows):
    gen = torch.Generator(device="cuda").manual_seed(5)
    a = (torch.rand(spec.total_m, spec.k, generator=gen, device="cuda") * 2 - 1).bfloat16()
    w = (torch.rand(spec.groups, spec.n, spec.k, generator=gen, device="cuda") * 2 - 1).bfloat16()
    offs = torch.tensor(rows, device="cuda").cumsum(0).to(torch.int32)
    return a, w, offs


class Refuses:
    """A measurer for a resumed tune: every candidate must come from the database."""

    def __init__(self, environment):
        self.environment = environment

    def measure(self, spec, rows, config):
        raise AssertionError(f"{config} measured again")

    def close(self) -> None:
        pass


def _use(db_path):
    from gemmtune.grouped import tuned

    tuned.use_database(db_path)
    return tuned


def test_tiny_tune_stores_trials_resumes_and_grouped_mm_uses_the_best(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import gemmtune.torch as gt
    from gemmtune.grouped import launch
    from gemmtune.tune.grouped_measure import WorkerMeasurer

    spec, db_path = spec_for_rows(ROWS, 256, 128), tmp_path / "t.sqlite"
    measurer = WorkerMeasurer(rounds=5, timeout_s=120)
    try:
        with GroupedTuningDB(db_path) as db:
            outcome = tune_grouped(spec, ROWS, measurer, db, limit=3)
            resumed = tune_grouped(spec, ROWS, Refuses(measurer.environment), db, limit=3)
    finally:
        measurer.close()
    assert all(t.ok for t in outcome.trials), [t.error for t in outcome.trials]
    assert all(t.torch_median_s for t in outcome.trials) and len(outcome.trials[0].samples_s) == 5
    assert resumed.new_trials == 0 and resumed.best == outcome.best
    tuned = _use(db_path)
    try:
        assert tuned.chosen_config(spec) == outcome.best.config
        a, w, offs = _inputs(torch, spec, ROWS)
        out = gt.grouped_mm(a, w.transpose(1, 2), offs)
        assert (spec, outcome.best.config, 0) in list(launch._kernels)
        torch.testing.assert_close(out.float(), torch._grouped_mm(a, w.transpose(1, 2), offs=offs).float(),
                                   atol=0.1, rtol=0.02)
    finally:
        tuned.use_database(None)


def test_grouped_mm_builds_a_recorded_non_default_config(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import gemmtune.torch as gt
    from gemmtune.compiler import nvrtc_version
    from gemmtune.device import query_device
    from gemmtune.grouped import launch
    from gemmtune.tune.grouped_records import GroupedContext
    from gemmtune.grouped.render import VERSION
    from gemmtune.tune.trial import Environment

    spec, db_path = spec_for_rows(ROWS, 256, 128), tmp_path / "t.sqlite"
    other = next(c for c in candidates(spec) if c != default_config(spec) and c.cluster == 1)
    context = GroupedContext(spec, ROWS, Environment.from_device(query_device(0), nvrtc_version()), VERSION)
    with GroupedTuningDB(db_path) as db:
        db.record(context, GroupedTrial(other, Status.OK, 1e-6, (1e-6,)))
        db.record(context, GroupedTrial(default_config(spec), Status.OK, 2e-6, (2e-6,)))
    tuned = _use(db_path)
    try:
        a, w, offs = _inputs(torch, spec, ROWS)
        gt.grouped_mm(a, w.transpose(1, 2), offs)
        assert (spec, other, 0) in list(launch._kernels)
    finally:
        tuned.use_database(None)


@pytest.fixture(scope="module")
def export_folder(tmp_path_factory: pytest.TempPathFactory):
    from gemmtune.device import query_device
    from gemmtune.export.grouped import export_grouped
    from gemmtune.export.toolchain import find_nvcc

    if find_nvcc() is None:
        pytest.skip("no nvcc")
    spec = GroupedSpec(4, sum(ROWS), 256, 128, "bf16", "bias+relu")
    return export_grouped(spec, default_config(spec), tmp_path_factory.mktemp("gx") / "moe",
                          sm_count=query_device(0).sm_count)


def test_exported_harness_passes(export_folder) -> None:
    from gemmtune.export.toolchain import build_harness

    binary = build_harness(export_folder.path)
    done = subprocess.run([str(binary), "3"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr


SHIM = """#include "{name}.cuh"
extern "C" int run(const void* A, const void* B, const int* offs, const void* bias, void* D, int groups, int total_m,
                   void* stream) {{
    return (int){name}((const __nv_bfloat16*)A, (const __nv_bfloat16*)B, offs, (const __nv_bfloat16*)bias,
                       (__nv_bfloat16*)D, groups, total_m, (cudaStream_t)stream);
}}
"""


def test_exported_launcher_through_ctypes_matches_torch(export_folder) -> None:
    torch = pytest.importorskip("torch")
    from gemmtune.export.cmake import nvcc_arch_flag
    from gemmtune.export.toolchain import find_nvcc

    folder, name, spec = export_folder.path, export_folder.name, export_folder.spec
    (folder / "shim.cu").write_text(SHIM.format(name=name))
    library = folder / "libshim.so"
    subprocess.run([str(find_nvcc().path), "-O2", "-std=c++17", nvcc_arch_flag("sm_90a"), "-shared", "-Xcompiler",
                    "-fPIC", "shim.cu", "-lcuda", "-o", str(library)], cwd=folder, check=True, timeout=300)
    run = ctypes.CDLL(str(library)).run
    run.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    a, w, offs = _inputs(torch, spec, ROWS)
    bias = torch.randn(spec.groups, spec.n, device="cuda").bfloat16()
    d = torch.full((spec.total_m, spec.n), float("nan"), device="cuda").bfloat16()
    stream = torch.cuda.current_stream().cuda_stream
    args = (a.data_ptr(), w.data_ptr(), offs.data_ptr(), bias.data_ptr(), d.data_ptr())
    assert run(*args, spec.groups + 1, spec.total_m, stream) != 0  # another G: refused, nothing launched
    assert run(*args, spec.groups, spec.total_m, stream) == 0
    torch.cuda.synchronize()
    group = torch.repeat_interleave(torch.arange(spec.groups, device="cuda"), torch.tensor(ROWS, device="cuda"))
    expected = torch.relu(torch._grouped_mm(a, w.transpose(1, 2), offs=offs).float() + bias.float()[group])
    torch.testing.assert_close(d.float(), expected, atol=0.1, rtol=0.02)
