"""runtime.py and device.py without a GPU: argument validation, packing and launch checks."""
from __future__ import annotations

import ctypes
from dataclasses import replace

import pytest

from gemmtune.compiler import CompiledKernel, ResourceUsage
from gemmtune.device import DeviceInfo, checked, gpu_available, query_device
from gemmtune.errors import LaunchError, NoDeviceError, SpecError
from gemmtune.kernel_source import KernelSource
from gemmtune.runtime import DeviceBuffer, arch_problem, pack_arguments, pointer_of, resource_problems
from gemmtune.spec import GemmSpec

H100 = DeviceInfo(ordinal=0, name="NVIDIA H100 80GB HBM3", cc=(9, 0), sm_count=132, max_threads_per_block=1024,
                  smem_per_block=49152, smem_per_block_optin=232448, smem_per_sm=233472, regs_per_block=65536,
                  regs_per_sm=65536, l2_bytes=52428800, total_memory=85 * 2**30, driver_version="12.8")


class FakeCudaArray:
    """Stands in for a torch/cupy array: only __cuda_array_interface__ matters."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x7F0000000000, requires_grad=False):
        self.requires_grad = requires_grad
        self._interface = {"shape": shape, "typestr": typestr, "strides": strides, "data": (ptr, False),
                           "version": 3}

    @property
    def __cuda_array_interface__(self) -> dict:
        if self.requires_grad:
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")
        return self._interface

    def detach(self) -> "FakeCudaArray":
        return FakeCudaArray(self._interface["shape"], ptr=self._interface["data"][0])


# --- pointer_of --------------------------------------------------------------------------------
def test_pointer_of_accepts_a_contiguous_fp32_array() -> None:
    assert pointer_of(FakeCudaArray((4, 8)), (4, 8), "A") == 0x7F0000000000
    assert pointer_of(FakeCudaArray((4, 8), strides=(32, 4)), (4, 8), "A") == 0x7F0000000000
    assert pointer_of(FakeCudaArray((1, 8), strides=(4, 4)), (1, 8), "A")  # size-1 axis: any stride
    assert pointer_of(FakeCudaArray((4, 8), requires_grad=True), (4, 8), "A")


@pytest.mark.parametrize("array,expected", [
    (FakeCudaArray((4, 8), typestr="<f8"), "dtype <f8"),
    (FakeCudaArray((8, 4)), "shape (8, 4), expected (4, 8)"),
    (FakeCudaArray((4, 8), strides=(4, 16)), "not C-contiguous"),
    (FakeCudaArray((4, 8), strides=(64, 4)), "not C-contiguous"),
    (FakeCudaArray((4, 8), ptr=0x7F0000000004), "not 16-byte aligned"),
])
def test_pointer_of_rejects_bad_arrays_in_one_line(array: FakeCudaArray, expected: str) -> None:
    with pytest.raises(SpecError) as info:
        pointer_of(array, (4, 8), "A")
    assert expected in str(info.value) and str(info.value).startswith("A ")
    assert "\n" not in str(info.value)


def test_pointer_of_rejects_host_arrays() -> None:
    np = pytest.importorskip("numpy")
    with pytest.raises(SpecError, match="host memory"):
        pointer_of(np.zeros((4, 8), np.float32), (4, 8), "B")


def test_pointer_of_checks_device_buffer_size() -> None:
    buf = DeviceBuffer(0x1000, 128)  # not allocated: pointer_of only reads ptr and nbytes
    assert pointer_of(buf, (4, 8), "D") == 0x1000
    with pytest.raises(SpecError, match="needs 132 B"):
        pointer_of(buf, (3, 11), "D")


# --- argument packing --------------------------------------------------------------------------
def test_pack_arguments_in_parameter_order() -> None:
    packed = pack_arguments(("A", "B", "alpha", "D"), {"D": 0x3000, "A": 0x1000, "B": DeviceBuffer(0x2000, 4),
                                                       "alpha": 1.5})
    slots = (ctypes.c_void_p * 4).from_address(packed.address)
    assert ctypes.c_void_p.from_address(slots[0]).value == 0x1000
    assert ctypes.c_void_p.from_address(slots[1]).value == 0x2000
    assert ctypes.c_float.from_address(slots[2]).value == 1.5
    assert ctypes.c_void_p.from_address(slots[3]).value == 0x3000
    assert ctypes.sizeof(packed.values[2]) == 4 and ctypes.sizeof(packed.values[0]) == 8


def test_pack_arguments_rejects_missing_and_null() -> None:
    with pytest.raises(SpecError, match="'C'"):
        pack_arguments(("A", "C", "D"), {"A": 1, "D": 2})
    with pytest.raises(SpecError, match="null pointer"):
        pack_arguments(("A", "D"), {"A": 1, "D": 0})


# --- launch checks -----------------------------------------------------------------------------
def _compiled(arch="sm_90", threads=256, registers=64, static_smem=0, dynamic_smem=0, grid=(8, 8, 1)):
    source = KernelSource("", "k", grid, (threads, 1, 1), ("A", "B", "D"), GemmSpec(64, 64, 64), "test", "1",
                          dynamic_smem=dynamic_smem)
    return CompiledKernel(source, arch, b"", "", ResourceUsage(registers, static_smem, 0, 0, 0), "", 0.0, "13.0")


@pytest.mark.parametrize("arch,ok", [("sm_90", True), ("sm_90a", True), ("sm_80", False), ("sm_89", False)])
def test_arch_problem(arch: str, ok: bool) -> None:
    assert (arch_problem(arch, H100) is None) == ok
    ampere = replace(H100, cc=(8, 6))
    assert arch_problem("sm_80", ampere) is None and arch_problem("sm_80a", ampere) is not None


def test_resource_problems() -> None:
    assert resource_problems(_compiled(), H100) == []
    assert resource_problems(_compiled(dynamic_smem=200 * 1024, static_smem=16 * 1024), H100) == []
    assert "shared memory" in resource_problems(_compiled(dynamic_smem=220 * 1024, static_smem=16 * 1024), H100)[0]
    assert "registers" in resource_problems(_compiled(threads=1024, registers=72), H100)[0]
    assert "threads" in resource_problems(_compiled(threads=2048, registers=16), H100)[0]
    assert "grid" in resource_problems(_compiled(grid=(1, 70000, 1)), H100)[0]


# --- device ------------------------------------------------------------------------------------
def test_checked_names_the_cuda_error() -> None:
    from cuda.bindings import driver as cu

    assert checked((cu.CUresult.CUDA_SUCCESS, 7), "x") == 7
    assert checked((cu.CUresult.CUDA_SUCCESS,), "x") is None
    with pytest.raises(LaunchError, match="launching k failed: CUDA_ERROR_ILLEGAL_ADDRESS; the CUDA context is lost"):
        checked((cu.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,), "launching k")
    with pytest.raises(NoDeviceError, match="CUDA_ERROR_NO_DEVICE$"):
        checked((cu.CUresult.CUDA_ERROR_NO_DEVICE, None), "cuInit", NoDeviceError)


def test_device_info_json_round_trip() -> None:
    data = H100.to_json()
    assert data["arch"] == "sm_90" and data["cc"] == [9, 0]
    assert DeviceInfo.from_json(data) == H100
    assert "132 SMs" in H100.summary()


def test_gpu_available_never_raises() -> None:
    if gpu_available():
        assert query_device().sm_count > 0
    else:
        with pytest.raises(NoDeviceError) as info:
            query_device()
        assert "\n" not in str(info.value)


# --- per-dtype operands -----------------------------------------------------------------------------
class FakeTorchTensor:
    """Stands in for a torch CUDA tensor: torch refuses __cuda_array_interface__ for bf16, so the runtime
    reads data_ptr/dtype/shape/stride instead."""

    __module__ = "torch"

    def __init__(self, shape, dtype="torch.bfloat16", stride=None, ptr=0x7F0000000000, is_cuda=True):
        self.shape, self.dtype, self.is_cuda, self._ptr = shape, dtype, is_cuda, ptr
        self._stride = stride or (shape[1], 1)

    def stride(self):
        return self._stride

    def data_ptr(self):
        return self._ptr


def test_pointer_of_reads_torch_tensors_of_each_dtype() -> None:
    assert pointer_of(FakeTorchTensor((4, 8)), (4, 8), "A", "bf16") == 0x7F0000000000
    assert pointer_of(FakeTorchTensor((4, 8), "torch.float16"), (4, 8), "A", "fp16") == 0x7F0000000000
    assert pointer_of(FakeTorchTensor((4, 8), "torch.float32"), (4, 8), "D") == 0x7F0000000000


@pytest.mark.parametrize("tensor,dtype,expected", [
    (FakeTorchTensor((4, 8), "torch.float32"), "bf16", "A has dtype torch.float32, expected torch.bfloat16 (bf16)"),
    (FakeTorchTensor((4, 8), "torch.bfloat16"), "fp16", "expected torch.float16"),
    (FakeTorchTensor((8, 4)), "bf16", "shape (8, 4), expected (4, 8)"),
    (FakeTorchTensor((4, 8), stride=(1, 4)), "bf16", "not C-contiguous"),
    (FakeTorchTensor((4, 8), ptr=0x7F0000000002), "bf16", "not 16-byte aligned"),
    (FakeTorchTensor((4, 8), is_cuda=False), "bf16", "host memory"),
])
def test_torch_tensors_are_checked_per_dtype(tensor, dtype, expected) -> None:
    with pytest.raises(SpecError) as info:
        pointer_of(tensor, (4, 8), "A", dtype)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_array_interface_dtypes() -> None:
    assert pointer_of(FakeCudaArray((4, 8), typestr="<f2"), (4, 8), "A", "fp16") == 0x7F0000000000
    with pytest.raises(SpecError, match="expected <f2"):
        pointer_of(FakeCudaArray((4, 8)), (4, 8), "A", "fp16")
    with pytest.raises(SpecError, match="torch.bfloat16 CUDA tensor or a DeviceBuffer"):
        pointer_of(FakeCudaArray((4, 8)), (4, 8), "A", "bf16")
    with pytest.raises(SpecError, match="needs 96 B"):
        pointer_of(DeviceBuffer(0x1000, 64), (4, 12), "D", "bf16")


def test_bind_checks_each_operand_in_its_storage_type() -> None:
    from gemmtune.invoke import bind
    from gemmtune.kernel_source import KernelSource

    spec = GemmSpec(4, 8, 16, "nn", "bf16", "bias_col", "fp32")
    source = KernelSource("//", "k", (1, 1, 1), (32, 1, 1), ("A", "B", "bias", "D"), spec, "fake", "1")
    a, b = FakeTorchTensor((4, 16)), FakeTorchTensor((16, 8), ptr=0x7F0000001000)
    bias = FakeTorchTensor((8,), "torch.float32", stride=(1,), ptr=0x7F0000002000)
    d = FakeTorchTensor((4, 8), "torch.float32", ptr=0x7F0000003000)
    assert bind(source, a, b, {"bias": bias}, d) == {"A": 0x7F0000000000, "B": 0x7F0000001000,
                                                      "bias": 0x7F0000002000, "D": 0x7F0000003000}
    with pytest.raises(SpecError, match="D has dtype torch.bfloat16, expected torch.float32"):
        bind(source, a, b, {"bias": bias}, FakeTorchTensor((4, 8)))


def test_bind_gives_the_pointers_that_tensor_maps_describe() -> None:
    from gemmtune.invoke import bind
    from gemmtune.kernel_source import KernelSource, TensorMapArg

    spec = GemmSpec(64, 64, 64, "nt", "fp16")
    maps = (TensorMapArg("tma_A", "A", "fp16", (64, 64), (128,), (64, 64)),
            TensorMapArg("tma_B", "B", "fp16", (64, 64), (128,), (64, 64)))
    source = KernelSource("//", "k", (1, 1, 1), (128, 1, 1), ("tma_A", "tma_B", "D"), spec, "fake", "1",
                          tensor_maps=maps)
    a, b, d = (FakeTorchTensor((64, 64), "torch.float16", ptr=0x7F0000000000 + i * 0x10000) for i in range(3))
    bindings = bind(source, a, b, {}, d)
    assert bindings == {"D": 0x7F0000020000, "A": 0x7F0000000000, "B": 0x7F0000010000}


@pytest.mark.parametrize("arch,ok", [("compute_75", True), ("compute_89", True), ("compute_90", True), ("compute_100", False)])
def test_ptx_of_an_older_arch_loads_on_any_newer_gpu(arch: str, ok: bool) -> None:
    """PTX (compiler.ptx_image) is JIT-compiled by the driver: an H100 runs compute_75 .. compute_90, not compute_100."""
    assert (arch_problem(arch, H100) is None) == ok
    assert arch_problem("compute_89", replace(H100, cc=(8, 6))) is not None


def test_tensor_map_cache_encodes_each_pointer_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import gemmtune.runtime as runtime
    from gemmtune.kernel_source import TensorMapArg
    made: list[int] = []
    monkeypatch.setattr(runtime, "encode_tensor_map", lambda desc, ptr: made.append(ptr) or (ctypes.c_char * 128)())
    desc = TensorMapArg("tma_B", "B", "bf16", (64, 64), (128,), (64, 64), 128)
    cache = runtime.TensorMapCache(capacity=2)
    first = pack_arguments(("tma_B", "D"), {"B": 0x1000, "D": 0x2000}, "k", (desc,), cache)
    again = pack_arguments(("tma_B", "D"), {"B": 0x1000, "D": 0x3000}, "k", (desc,), cache)
    assert made == [0x1000] and first.values[0] is again.values[0]
    cache(desc, 0x4000), cache(desc, 0x5000)  # two more pointers: 0x1000, the oldest, is dropped
    assert len(cache) == 2 and cache.encoded == 3
    cache(desc, 0x1000)
    assert made == [0x1000, 0x4000, 0x5000, 0x1000]
