"""fp8 tuning, export and load on an sm_90a GPU (issues 69/70): a tiny fp8 tune (3 candidates in the watched worker,
verified against the dequantized operands and timed against torch._scaled_mm) stored and then used by
gemmtune.torch.scaled_mm; a block-scaled grouped tune against torch._scaled_grouped_mm; the exported fp8 launcher
through ctypes against torch._scaled_mm and its harness; gemmtune.load of grouped folders (bf16 and fp8)."""
from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from gemmtune.grouped import GroupedSpec, default_config
from gemmtune.spec import GemmSpec
from gemmtune.tune.grouped_db import GroupedTuningDB
from gemmtune.tune.grouped_tuner import spec_for_gemm, spec_for_rows, tune_grouped

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _hopper():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90a GPU")


def _quantized(rows: int, k: int, seed: int, scaling: str = "rowwise"):
    """randn (rows, K) as e4m3 codes with amax / 448 scales per row (rows, 1) or per tensor (1, 1)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(rows, k, generator=gen, device="cuda")
    amax = x.abs().amax(1, keepdim=True) if scaling == "rowwise" else x.abs().amax().reshape(1, 1)
    scale = (amax / torch.finfo(torch.float8_e4m3fn).max).float()
    return (x / scale).to(torch.float8_e4m3fn), scale


def test_tiny_fp8_tune_is_stored_and_scaled_mm_uses_it(tmp_path: Path) -> None:
    from gemmtune.grouped import launch, tuned
    from gemmtune.grouped.scaled_ops import scaled_mm
    from gemmtune.tune.grouped_measure import WorkerMeasurer

    m, n, k = 1000, 512, 1024
    grouped, rows = spec_for_gemm(GemmSpec(m, n, k, "nt", "e4m3", "bias_col", scaling="rowwise"))
    db_path = tmp_path / "t.sqlite"
    measurer = WorkerMeasurer(rounds=5, timeout_s=120)
    try:
        with GroupedTuningDB(db_path) as db:
            outcome = tune_grouped(grouped, rows, measurer, db, limit=3)
    finally:
        measurer.close()
    assert outcome.failures == 0, [t.error for t in outcome.trials]
    print({t.config.to_json().__repr__(): (t.median_s, t.torch_median_s, t.torch_op) for t in outcome.trials})
    assert all(t.torch_op == "torch._scaled_mm rowwise" and t.speedup for t in outcome.trials)
    best = outcome.best.config
    tuned.use_database(db_path)
    try:
        a, sa = _quantized(m, k, 1)
        w, sw = _quantized(n, k, 2)
        bias = torch.randn(n, device="cuda").bfloat16()
        got = scaled_mm(a, w.t(), sa, sw.reshape(1, n), bias, torch.bfloat16)
        called = GroupedSpec(1, m, n, k, "e4m3", "bias", out_dtype="bf16", scaling="rowwise")
        assert (called, best, 0) in set(launch._kernels)  # built with the tuned config
        want = torch._scaled_mm(a, w.t(), sa, sw.reshape(1, n), bias=bias, out_dtype=torch.bfloat16)
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2 * want.float().abs().max().item())
    finally:
        tuned.use_database(None)


@pytest.mark.parametrize("rows", [(300, 0, 77), (200,)])
def test_block_scaled_tune_names_the_torch_call(rows, tmp_path: Path) -> None:
    from gemmtune.tune.grouped_measure import WorkerMeasurer

    spec = spec_for_rows(rows, 384, 512, "e4m3", "none", scaling="block")
    measurer = WorkerMeasurer(rounds=3, timeout_s=120)
    try:
        with GroupedTuningDB(tmp_path / "t.sqlite") as db:
            outcome = tune_grouped(spec, rows, measurer, db, limit=2)
    finally:
        measurer.close()
    assert outcome.failures == 0, [t.error for t in outcome.trials]
    ops = {t.torch_op for t in outcome.trials}
    print(rows, ops)
    want = "torch._scaled_mm" if len(rows) == 1 else "torch._scaled_grouped_mm"
    assert len(ops) == 1 and (not next(iter(ops)) or next(iter(ops)).startswith(want))


# --- export and load ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fp8_gemm_folder(tmp_path_factory: pytest.TempPathFactory):
    from gemmtune.device import query_device
    from gemmtune.export.grouped import export_grouped

    grouped, _ = spec_for_gemm(GemmSpec(300, 384, 512, "nt", "e4m3", "bias_col", scaling="rowwise"))
    return export_grouped(grouped, default_config(grouped), tmp_path_factory.mktemp("fp8") / "gemm",
                          name="fp8_gemm", sm_count=query_device(0).sm_count, gemm=True)


SHIM = """#include "fp8_gemm.cuh"
extern "C" int run(const void* A, const void* B, const void* bias, const float* scale_a, const float* scale_b, void* D,
                   void* stream) {
    return (int)fp8_gemm((const unsigned char*)A, (const unsigned char*)B, (const __nv_bfloat16*)bias, scale_a, scale_b,
                         (__nv_bfloat16*)D, (cudaStream_t)stream);
}
"""


def test_exported_fp8_launcher_through_ctypes_matches_torch_scaled_mm(fp8_gemm_folder) -> None:
    from gemmtune.export.cmake import nvcc_arch_flag
    from gemmtune.export.toolchain import find_nvcc

    if find_nvcc() is None:
        pytest.skip("no nvcc")
    folder = fp8_gemm_folder.path
    (folder / "shim.cu").write_text(SHIM)
    library = folder / "libshim.so"
    subprocess.run([str(find_nvcc().path), "-O2", "-std=c++17", nvcc_arch_flag("sm_90a"), "-shared", "-Xcompiler",
                    "-fPIC", "shim.cu", "-lcuda", "-o", str(library)], cwd=folder, check=True, timeout=300)
    run = ctypes.CDLL(str(library)).run
    run.argtypes = [ctypes.c_void_p] * 7
    m, n, k = 300, 384, 512
    a, sa = _quantized(m, k, 3)
    w, sw = _quantized(n, k, 4)
    bias = torch.randn(n, device="cuda").bfloat16()
    d = torch.full((m, n), float("nan"), device="cuda").bfloat16()
    assert run(a.data_ptr(), w.data_ptr(), bias.data_ptr(), sa.data_ptr(), sw.data_ptr(), d.data_ptr(),
               torch.cuda.current_stream().cuda_stream) == 0
    torch.cuda.synchronize()
    want = torch._scaled_mm(a, w.t(), sa, sw.reshape(1, n), bias=bias, out_dtype=torch.bfloat16)
    torch.testing.assert_close(d.float(), want.float(), rtol=2e-2, atol=2e-2 * want.float().abs().max().item())


@pytest.mark.parametrize("out_dtype", ["bf16", "fp32"])
def test_exported_fp8_grouped_harness_passes(out_dtype: str, tmp_path: Path) -> None:
    from gemmtune.device import query_device
    from gemmtune.export.grouped import export_grouped
    from gemmtune.export.toolchain import build_harness, find_nvcc

    if find_nvcc() is None:
        pytest.skip("no nvcc")
    spec = GroupedSpec(4, 600, 320, 400, "e4m3", "bias+gelu", out_dtype=out_dtype, scaling="block")
    result = export_grouped(spec, default_config(spec), tmp_path / "h", sm_count=query_device(0).sm_count)
    done = subprocess.run([str(build_harness(result.path)), "3"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr


def test_load_runs_an_fp8_gemm_folder(fp8_gemm_folder) -> None:
    import gemmtune

    fn = gemmtune.load(fp8_gemm_folder.path)
    m, n, k = 300, 384, 512
    a, sa = _quantized(m, k, 5)
    w, sw = _quantized(n, k, 6)
    bias = torch.randn(n, device="cuda").bfloat16()
    got = fn(a, w.t(), bias, sa, sw.reshape(1, n))
    want = torch._scaled_mm(a, w.t(), sa, sw.reshape(1, n), bias=bias, out_dtype=torch.bfloat16)
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2 * want.float().abs().max().item())
    with pytest.raises(gemmtune.GemmtuneError, match="scale_b"):
        fn(a, w.t(), bias, sa, sw[:10])


def test_load_runs_a_grouped_bf16_folder(tmp_path: Path) -> None:
    import gemmtune
    from gemmtune.device import query_device
    from gemmtune.export.grouped import export_grouped

    rows = (200, 0, 77, 300)
    spec = GroupedSpec(4, sum(rows), 256, 128, "bf16", "bias+relu")
    export_grouped(spec, default_config(spec), tmp_path / "moe", sm_count=query_device(0).sm_count)
    fn = gemmtune.load(tmp_path / "moe")
    assert "ExportedGrouped" in repr(fn)
    gen = torch.Generator(device="cuda").manual_seed(5)
    a = (torch.rand(spec.total_m, spec.k, generator=gen, device="cuda") * 2 - 1).bfloat16()
    w = (torch.rand(spec.groups, spec.n, spec.k, generator=gen, device="cuda") * 2 - 1).bfloat16()
    offs = torch.tensor(rows, device="cuda").cumsum(0).to(torch.int32)
    bias = torch.randn(spec.groups, spec.n, device="cuda").bfloat16()
    got = fn(a, w.transpose(1, 2), offs, bias)
    group = torch.repeat_interleave(torch.arange(spec.groups, device="cuda"), torch.tensor(rows, device="cuda"))
    want = torch.relu(torch._grouped_mm(a, w.transpose(1, 2), offs=offs).float() + bias.float()[group])
    torch.testing.assert_close(got.float(), want, atol=0.1, rtol=0.02)
    with pytest.raises(gemmtune.GemmtuneError, match="missing bias"):
        fn(a, w.transpose(1, 2), offs)
