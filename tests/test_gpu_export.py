"""On the GPU: an exported folder builds (CMake or nvcc), runs and passes its own check, its check
catches a wrong kernel, and gemmtune.load(DIR) gives the result of building the same spec in-process."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gemmtune.compiler import ARCHES
from gemmtune.spec import GemmSpec

pytestmark = pytest.mark.gpu

SPEC = GemmSpec(1000, 520, 300, layout="nt", epilogue="relu+add")  # ragged edges on every side


@pytest.fixture(scope="module")
def device():
    from gemmtune.device import query_device

    return query_device()


@pytest.fixture(scope="module")
def folder(tmp_path_factory, device) -> Path:
    from gemmtune.export import export_spec

    arch = device.arch if device.arch in ARCHES else "sm_90"
    return export_spec(SPEC, tmp_path_factory.mktemp("export") / "gemm", arch=arch, device=device).path


def _run(executable: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(executable), "5"], capture_output=True, text=True, timeout=300)


def _nvcc():
    from gemmtune.export.toolchain import find_nvcc

    found = find_nvcc()
    if found is None:
        pytest.skip("no nvcc (pip install the test extra)")
    return found


def test_nvcc_build_runs_and_passes_its_check(folder):
    from gemmtune.export.toolchain import build_harness

    done = _run(build_harness(folder, _nvcc()))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout and "TFLOP/s" in done.stdout


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_build_runs_and_passes_its_check(folder, tmp_path):
    from gemmtune.export.manifest import read_manifest

    build = tmp_path / "build"
    configure = subprocess.run(["cmake", "-S", str(folder), "-B", str(build),
                                f"-DCMAKE_CUDA_COMPILER={_nvcc().path}"], capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    made = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    done = _run(build / f"{read_manifest(folder).name}_check")
    assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr


def test_the_harness_catches_a_wrong_kernel(folder, tmp_path):
    from gemmtune.export.manifest import read_manifest
    from gemmtune.export.toolchain import build_harness

    broken = Path(shutil.copytree(folder, tmp_path / "broken"))
    header = broken / read_manifest(broken).files["header"]
    text = header.read_text()
    assert "v = fmaxf(v, 0.0f);" in text
    header.write_text(text.replace("v = fmaxf(v, 0.0f);", "/* relu dropped */"))
    done = _run(build_harness(broken, _nvcc()))
    assert done.returncode == 1 and "FAIL" in done.stdout, done.stdout + done.stderr


def _inputs_on_device(inputs: dict) -> dict:
    from gemmtune.runtime import DeviceBuffer

    return {k: DeviceBuffer.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def test_load_matches_building_the_same_spec_in_process(folder):
    from gemmtune import build, load
    from gemmtune.export.manifest import read_manifest
    from gemmtune.kernels.simt.config import SimtConfig
    from gemmtune.runtime import DeviceBuffer, synchronize
    from gemmtune.verify import compare, make_inputs, reference

    manifest = read_manifest(folder)
    inputs = make_inputs(SPEC, np.random.default_rng(7))
    x = _inputs_on_device(inputs)
    loaded_out, built_out = (DeviceBuffer.alloc(SPEC.m * SPEC.n * 4) for _ in range(2))
    load(folder)(x["A"], x["B"], x["C"], out=loaded_out)
    build(SPEC, config=SimtConfig.from_json(manifest.config), arch=manifest.arch)(x["A"], x["B"], C=x["C"],
                                                                                  out=built_out)
    synchronize()
    got, expected = (buf.to_numpy((SPEC.m, SPEC.n)) for buf in (loaded_out, built_out))
    assert np.array_equal(got, expected)
    assert compare(got, reference(SPEC, inputs), SPEC.dtype, SPEC.k).ok
    for buf in (*[v for v in x.values() if isinstance(v, DeviceBuffer)], loaded_out, built_out):
        buf.free()


def test_load_on_torch_tensors_allocates_out_and_checks_shapes(folder):
    torch = pytest.importorskip("torch")
    from gemmtune import load
    from gemmtune.errors import SpecError

    gemm = load(folder)
    a = torch.rand(SPEC.a_shape, device="cuda") * 2 - 1
    b = torch.rand(SPEC.b_shape, device="cuda") * 2 - 1
    c = torch.rand((SPEC.m, SPEC.n), device="cuda") * 2 - 1
    d = gemm(a, b, c)
    torch.cuda.synchronize()
    expected = torch.relu(a.double() @ b.double().t()) + c.double()
    assert d.shape == (SPEC.m, SPEC.n) and torch.allclose(d.double(), expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(SpecError):
        gemm(a.t().contiguous(), b, c)
    with pytest.raises(SpecError):
        gemm(a, b)  # C is missing


def test_load_recompiles_a_cubin_built_for_another_gpu(tmp_path, device):
    from gemmtune import load
    from gemmtune.export import export_spec
    from gemmtune.runtime import arch_problem

    foreign = "sm_80" if device.cc[0] != 8 else "sm_90"
    if arch_problem(foreign, device) is None:
        pytest.skip(f"a {foreign} cubin runs on {device.arch} as it is")
    folder = export_spec(SPEC, tmp_path / "foreign", arch=foreign).path
    gemm = load(folder)
    assert gemm.manifest.arch == foreign and gemm.compiled.arch == device.arch


def test_a_cluster_of_16_kernel_exports_and_passes_its_check(tmp_path, device):
    """One vector of few outputs on sm_90: the K split over clusters of 16 blocks (non-portable), which
    the exported launcher must allow before it launches."""
    from gemmtune.export import export_spec
    from gemmtune.export.toolchain import build_harness
    from gemmtune.kernels.config_base import arch_number

    if arch_number(device.arch) != 90:
        pytest.skip("the K split over clusters of 16 is chosen on sm_90 only")
    spec = GemmSpec(1, 1000, 4100, layout="nn", dtype="fp32", epilogue="bias_col+relu")
    folder = export_spec(spec, tmp_path / "split", arch=device.arch, device=device).path
    headers = "".join(p.read_text() for p in folder.glob("*.cuh"))
    assert "cudaFuncAttributeNonPortableClusterSizeAllowed" in headers
    done = _run(build_harness(folder, _nvcc()))
    assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr


def test_a_tma_ring_gemv_exports_and_passes_its_check(tmp_path, device):
    """16 vectors against W stored K×N on sm_90: the columns kernel fed by TMA (GemvConfig.ring_stages), whose
    exported launcher builds the two tensor maps and asks for the ring's dynamic shared memory; K and N are
    multiples of no stage or strip."""
    from gemmtune.export import export_spec
    from gemmtune.export.toolchain import build_harness
    from gemmtune.kernels.config_base import arch_number

    if arch_number(device.arch) != 90:
        pytest.skip("the TMA-fed columns kernel is chosen on sm_90 only")
    spec = GemmSpec(16, 2052, 4100, layout="nn", dtype="fp32", epilogue="bias_col+gelu+add")
    folder = export_spec(spec, tmp_path / "ring", arch=device.arch, device=device).path
    headers = "".join(p.read_text() for p in folder.glob("*.cuh"))
    assert "TMA ring" in headers and "cuTensorMapEncodeTiled" in headers
    done = _run(build_harness(folder, _nvcc()))
    assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr
