"""16-bit and tf32 on a real GPU: storage round trips, a hand-written 16-bit kernel through evaluate(),
and the cuBLAS / torch eager baselines in fp16, bf16 and tf32.

Every test here is marked `gpu` and skips without a driver and GPU (see conftest.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from gemmtune.compiler import compile_kernel
from gemmtune.device import query_device
from gemmtune.dtypes import STORAGE, from_storage, round_to, to_storage
from gemmtune.evaluate import evaluate
from gemmtune.kernel_source import KernelSource
from gemmtune.runtime import DeviceBuffer
from gemmtune.spec import GemmSpec
from gemmtune.timing import TimingProtocol

pytestmark = pytest.mark.gpu

QUICK = TimingProtocol(warmup=1, min_reps=3, max_reps=10, min_time_s=0.0)


_CODE = r"""
__device__ __forceinline__ float load(float x) { return x; }
__device__ __forceinline__ float load(unsigned short x) {
    float f;
    %(load16)s
    return f;
}
__device__ __forceinline__ void store(float* d, float v) { *d = v; }
__device__ __forceinline__ void store(unsigned short* d, float v) {
    unsigned short h;
    asm("cvt.rn.%(out_ptx)s.f32 %%0, %%1;" : "=h"(h) : "f"(v));
    *d = h;
}
// D = A·B, one thread per element, fp32 accumulation of the stored inputs, one rounding of D.
extern "C" __global__ void %(entry)s(const %(in_t)s* A, const %(in_t)s* B, %(out_t)s* D) {
    const int M = %(m)d, N = %(n)d, K = %(k)d;
    const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N %(skip)s) return;
    float acc = 0.0f;
    for (int p = 0; p < K; ++p) acc = fmaf(load(A[row * K + p]), load(B[p * N + col]), acc);
    store(&D[row * N + col], acc);
}
"""
_LOAD16 = {"bf16": "f = __uint_as_float((unsigned)x << 16);", "fp16": 'asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));'}
_C_TYPE = {"fp32": "float", "fp16": "unsigned short", "bf16": "unsigned short"}


def naive_source(spec: GemmSpec, skip_last: bool = False) -> KernelSource:
    entry = "naive16_skip" if skip_last else "naive16"
    load16 = _LOAD16[spec.dtype]
    code = _CODE % {"load16": load16, "out_ptx": "bf16" if spec.out_dtype == "bf16" else "f16", "entry": entry,
                    "in_t": _C_TYPE[spec.dtype], "out_t": _C_TYPE[spec.out_dtype], "m": spec.m, "n": spec.n,
                    "k": spec.k, "skip": "|| col == N - 1" if skip_last else ""}
    grid = (-(-spec.n // 16), -(-spec.m // 16), 1)
    return KernelSource(code, entry, grid, (16, 16, 1), ("A", "B", "D"), spec, "test", "1")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_16_bit_upload_poison_readback(dtype: str) -> None:
    values = round_to(np.random.default_rng(0).uniform(-1, 1, (7, 9)).astype(np.float32), dtype)  # odd count
    with DeviceBuffer.from_numpy(to_storage(values, dtype)) as buf:
        np.testing.assert_array_equal(from_storage(buf.to_numpy((7, 9), STORAGE[dtype]), dtype), values)
        buf.fill_nan(dtype)
        assert np.isnan(from_storage(buf.to_numpy((7, 9), STORAGE[dtype]), dtype)).all()


@pytest.mark.parametrize("dtype,out", [("fp16", "fp16"), ("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp32")])
def test_16_bit_kernel_is_verified_through_evaluate(dtype: str, out: str) -> None:
    spec = GemmSpec(127, 129, 131, "nn", dtype, out_dtype=out)
    arch = query_device().arch
    good = evaluate(compile_kernel(naive_source(spec), arch), QUICK, np.random.default_rng(1))
    assert good.ok and good.measurement is not None, good.verify.message
    bad = evaluate(compile_kernel(naive_source(spec, skip_last=True), arch), QUICK, np.random.default_rng(1))
    assert not bad.ok and bad.verify.nan_count == spec.m  # the poisoned column shows


def test_torch_bf16_tensors_bind_and_run() -> None:
    torch = pytest.importorskip("torch")
    from gemmtune.invoke import bind, empty_like_framework
    from gemmtune.runtime import LoadedKernel, synchronize

    spec = GemmSpec(33, 65, 17, "nn", "bf16")
    a = torch.randn(33, 17, device="cuda").bfloat16()
    b = torch.randn(17, 65, device="cuda").bfloat16()
    d = empty_like_framework(a, (33, 65), spec.out_dtype)
    assert d.dtype == torch.bfloat16
    source = naive_source(spec)
    with LoadedKernel(compile_kernel(source, query_device().arch)) as kernel:
        kernel.launch(bind(source, a, b, {}, d))
        synchronize()
    torch.testing.assert_close(d.float(), (a.float() @ b.float()).bfloat16().float(), rtol=2**-7, atol=1e-2)


# --- baselines ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,out", [("fp16", None), ("bf16", None), ("tf32", None), ("bf16", "fp32")])
def test_cublas_baseline_per_dtype(dtype: str, out: str | None) -> None:
    pytest.importorskip("torch")
    from gemmtune.baseline import cublas_measurement, matmul_label

    spec = GemmSpec(1000, 1000, 1000, "nt", dtype, out_dtype=out)
    m = cublas_measurement(spec, QUICK)  # raises VerifyError when the output misses the dtype tolerance
    assert m.median_s > 0
    assert matmul_label(spec) in ("torch.matmul fp16", "torch.matmul bf16", "torch.matmul, tf32 on",
                                  "torch.matmul bf16, fp32 out")


def test_tf32_setting_is_restored() -> None:
    torch = pytest.importorskip("torch")
    from gemmtune.baseline import cublas_measurement

    matmul = torch.backends.cuda.matmul
    name = "fp32_precision" if hasattr(matmul, "fp32_precision") else "allow_tf32"
    before = getattr(matmul, name)
    cublas_measurement(GemmSpec(512, 512, 512, dtype="tf32"), QUICK)
    assert getattr(matmul, name) == before


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_torch_eager_baseline_16_bit_with_epilogue(dtype: str) -> None:
    pytest.importorskip("torch")
    from gemmtune.baseline import torch_eager_measurement

    spec = GemmSpec(1024, 512, 768, "nn", dtype, "relu+add")
    assert torch_eager_measurement(spec, QUICK).median_s > 0
