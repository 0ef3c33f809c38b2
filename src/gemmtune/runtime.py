"""Device memory, kernel loading and launching through the CUDA driver API.

Every driver call goes through ``device.checked`` so that a failure becomes a one-line
LaunchError/ResourceError naming the CUresult (e.g. CUDA_ERROR_ILLEGAL_ADDRESS).
"""
from __future__ import annotations

import ctypes
from collections import OrderedDict
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from .compiler import CompiledKernel
from .device import DeviceInfo, checked, driver, ensure_context, query_device
from .dtypes import NAN_BITS, storage_bytes
from .errors import LaunchError, ResourceError, SpecError
from .kernel_source import PORTABLE_CLUSTER_BLOCKS, SCALAR_ARGS, KernelSource, StagedOperand, TensorMapArg
from .kernels.parts import staging
from .stream_order import StreamOrder, shared_order
from .tensor_map import encode_tensor_map

NAN_F32_BITS = NAN_BITS["fp32"]  # a quiet float32 NaN: poisons outputs so unwritten elements show
# __cuda_array_interface__ typestr of each storage type (bf16 has none: numpy cannot name it).
TYPESTR = {"fp32": "<f4", "fp16": "<f2"}
ALIGNMENT = 16  # bytes; generated kernels use 128-bit vector loads
MAX_GRID_YZ = 65535
MAX_GRID_X = 2**31 - 1
REGISTER_UNIT = 256  # registers are allocated per warp in units of 256


class DeviceBuffer:
    """Bytes of device memory from cuMemAlloc. Owns them: call free() (idempotent) or use `with`."""

    __slots__ = ("ptr", "nbytes")

    def __init__(self, ptr: int, nbytes: int):
        self.ptr = ptr
        self.nbytes = nbytes

    @staticmethod
    def alloc(nbytes: int) -> "DeviceBuffer":
        if nbytes < 1:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        ensure_context()
        ptr = checked(driver().cuMemAlloc(nbytes), f"cuMemAlloc({nbytes} B)", ResourceError)
        return DeviceBuffer(int(ptr), nbytes)

    @staticmethod
    def from_numpy(array: np.ndarray) -> "DeviceBuffer":
        host = np.ascontiguousarray(array)
        buf = DeviceBuffer.alloc(host.nbytes)
        try:
            buf.upload(host)
        except BaseException:
            release([buf.free], after_error=True)
            raise
        return buf

    def upload(self, array: np.ndarray) -> None:
        host = np.ascontiguousarray(array)
        if host.nbytes != self.nbytes:
            raise ValueError(f"uploading {host.nbytes} B into a buffer of {self.nbytes} B")
        checked(driver().cuMemcpyHtoD(self.ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def to_numpy(self, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
        host = np.empty(shape, dtype=dtype)
        if host.nbytes > self.nbytes:
            raise ValueError(f"reading {host.nbytes} B from a buffer of {self.nbytes} B")
        checked(driver().cuMemcpyDtoH(host.ctypes.data, self.ptr, host.nbytes), "cuMemcpyDtoH")
        return host

    def fill_u32(self, value: int, stream: Any = None) -> None:
        """Set every 32-bit word to `value`; asynchronous on `stream` when one is given."""
        cu, words = driver(), self.nbytes // 4
        if stream is None:
            checked(cu.cuMemsetD32(self.ptr, value, words), "cuMemsetD32")
        else:
            checked(cu.cuMemsetD32Async(self.ptr, value, words, stream), "cuMemsetD32Async")

    def fill_u16(self, value: int) -> None:
        """Set every 16-bit half-word to `value` (also the last one of an odd count)."""
        checked(driver().cuMemsetD16(self.ptr, value, self.nbytes // 2), "cuMemsetD16")

    def fill_nan(self, dtype: str = "fp32") -> None:
        """Poison every element with a quiet NaN of `dtype` (fp32, fp16 or bf16)."""
        if storage_bytes(dtype) == 2:
            self.fill_u16(NAN_BITS[dtype])
        else:
            self.fill_u32(NAN_BITS[dtype])

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            checked(driver().cuMemFree(ptr), "cuMemFree")

    def __int__(self) -> int:
        return self.ptr

    def __enter__(self) -> "DeviceBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __repr__(self) -> str:
        return f"DeviceBuffer(ptr=0x{self.ptr:x}, nbytes={self.nbytes})"


# --- foreign arrays ----------------------------------------------------------------------------
def pointer_of(array: Any, shape: tuple[int, ...], what: str, dtype: str = "fp32") -> int:
    """The device address of `array` after checking it can stand in for operand `what` of `dtype`
    (storage type: fp32, fp16 or bf16).

    Accepts a DeviceBuffer (size checked), a torch CUDA tensor (dtype, shape, C-contiguity, 16-byte
    alignment, read through data_ptr/stride: torch refuses __cuda_array_interface__ for bf16), or
    anything else with __cuda_array_interface__ (cupy; no bf16 there) with the same checks.
    """
    shape = tuple(int(d) for d in shape)
    if isinstance(array, DeviceBuffer):
        need = math.prod(shape) * storage_bytes(dtype)
        if array.nbytes < need:
            raise SpecError(f"{what}: buffer holds {array.nbytes} B, {shape} needs {need} B")
        return array.ptr
    if type(array).__module__.split(".")[0] == "torch":
        return torch_pointer(array, shape, what, dtype)
    if getattr(array, "requires_grad", False):  # interface providers may refuse it on grad arrays
        array = array.detach()
    interface = getattr(array, "__cuda_array_interface__", None)
    if interface is None:
        raise SpecError(f"{what} is a {type(array).__name__} in host memory; pass a CUDA tensor/array "
                        "(torch on cuda, cupy) or a DeviceBuffer")
    if dtype not in TYPESTR:
        raise SpecError(f"{what} must be {dtype}: pass a torch.bfloat16 CUDA tensor or a DeviceBuffer "
                        f"(__cuda_array_interface__ has no {dtype} type)")
    return check_array_interface(interface, shape, what, TYPESTR[dtype])


TORCH_DTYPES = {"fp32": "torch.float32", "fp16": "torch.float16", "bf16": "torch.bfloat16"}


def torch_pointer(tensor: Any, shape: tuple[int, ...], what: str, dtype: str = "fp32") -> int:
    """data_ptr() of a torch tensor after checking device, dtype, shape, C-contiguity and alignment."""
    if not getattr(tensor, "is_cuda", False):
        raise SpecError(f"{what} is a torch tensor in host memory; move it to the GPU (.cuda())")
    if str(tensor.dtype) != TORCH_DTYPES[dtype]:
        raise SpecError(f"{what} has dtype {tensor.dtype}, expected {TORCH_DTYPES[dtype]} ({dtype})")
    got_shape = tuple(int(d) for d in tensor.shape)
    if got_shape != shape:
        raise SpecError(f"{what} has shape {got_shape}, expected {shape}")
    itemsize = storage_bytes(dtype)
    if not _c_contiguous(got_shape, tuple(int(s) * itemsize for s in tensor.stride()), itemsize):
        raise SpecError(f"{what} is not C-contiguous (strides {tuple(tensor.stride())}); pass .contiguous()")
    return _aligned(int(tensor.data_ptr()), what)


def check_array_interface(interface: Mapping[str, Any], shape: tuple[int, ...], what: str,
                          typestr: str = "<f4") -> int:
    """Validate a __cuda_array_interface__ dict; return its data pointer."""
    got_shape = tuple(int(d) for d in interface["shape"])
    if interface["typestr"] != typestr:
        raise SpecError(f"{what} has dtype {interface['typestr']}, expected {typestr} ({np.dtype(typestr).name})")
    if got_shape != shape:
        raise SpecError(f"{what} has shape {got_shape}, expected {shape}")
    itemsize = np.dtype(typestr).itemsize
    if not _c_contiguous(got_shape, interface.get("strides"), itemsize):
        raise SpecError(f"{what} is not C-contiguous (strides {interface.get('strides')}); "
                        "pass .contiguous() / a row-major copy")
    if interface.get("mask") is not None:
        raise SpecError(f"{what} is a masked array; pass a plain one")
    return _aligned(int(interface["data"][0]), what)


def _aligned(ptr: int, what: str) -> int:
    if ptr % ALIGNMENT:
        raise SpecError(f"{what} starts at 0x{ptr:x}, not {ALIGNMENT}-byte aligned; pass a fresh allocation")
    return ptr


def _c_contiguous(shape: tuple[int, ...], strides: Any, itemsize: int) -> bool:
    if strides is None:  # the interface's way of saying C-contiguous
        return True
    expected = itemsize
    for dim, stride in zip(reversed(shape), reversed(tuple(strides))):
        if dim != 1 and stride != expected:  # a size-1 axis may report any stride
            return False
        expected *= dim
    return True


# --- launch checks -----------------------------------------------------------------------------
def arch_problem(arch: str, info: DeviceInfo) -> str | None:
    """Why a cubin for `arch` cannot load on `info`, or None. SASS runs on the same major with
    an equal or higher minor; 'a' (arch-specific) cubins run on exactly their own arch; PTX
    (`compute_XX`: compiler.ptx_image) on any GPU of that compute capability or newer (JIT-compiled)."""
    ptx = arch.startswith("compute_")
    digits = arch.removeprefix("compute_" if ptx else "sm_").rstrip("a")
    major, minor = int(digits[:-1]), int(digits[-1])
    exact = arch.endswith("a")
    if ptx:
        fits = info.cc >= (major, minor)
    else:
        fits = info.cc == (major, minor) if exact else (info.cc[0] == major and info.cc[1] >= minor)
    return None if fits else f"the kernel was compiled for {arch} but GPU {info.ordinal} is {info.arch}"


def resource_problems(compiled: CompiledKernel, info: DeviceInfo) -> list[str]:
    """Reasons the launch would be refused for resources, checked before asking the driver."""
    src, res = compiled.source, compiled.resources
    problems = []
    if src.threads > info.max_threads_per_block:
        problems.append(f"{src.threads} threads per block exceed {info.max_threads_per_block}")
    smem = res.shared_bytes + src.dynamic_smem
    if smem > info.smem_per_block_optin:
        problems.append(f"{smem} B of shared memory per block exceed {info.smem_per_block_optin} B")
    warps = -(-src.threads // 32)
    regs = warps * -(-res.registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    if regs > info.regs_per_block:
        problems.append(f"{res.registers} registers x {src.threads} threads need {regs} of {info.regs_per_block}")
    gx, gy, gz = src.grid
    if not (1 <= gx <= MAX_GRID_X and 1 <= gy <= MAX_GRID_YZ and 1 <= gz <= MAX_GRID_YZ):
        problems.append(f"grid {src.grid} is outside the limits ({MAX_GRID_X}, {MAX_GRID_YZ}, {MAX_GRID_YZ})")
    return problems


def co_residency_problem(grid_blocks: int, resident_blocks: int, entry: str) -> str | None:
    """Why a kernel whose blocks wait on each other's results could hang on this GPU, or None.
    All its blocks must be resident at once: a waiting block that holds the SM its producer needs
    never lets it start."""
    if resident_blocks >= grid_blocks:
        return None
    return (f"{entry}: its {grid_blocks} blocks wait on each other and must all be resident, but this GPU "
            f"holds {resident_blocks} at once (a split_tail schedule sized for a larger GPU); "
            "tune or build without split_tail for this GPU")


def cluster_size(function: Any) -> int:
    """Blocks per cluster the kernel was compiled for (__cluster_dims__); 1 without clusters."""
    cu = driver()
    dims = [checked(cu.cuFuncGetAttribute(getattr(cu.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_{d}"),
                                          function), f"cuFuncGetAttribute(REQUIRED_CLUSTER_{d})")
            for d in ("WIDTH", "HEIGHT", "DEPTH")]
    return max(1, math.prod(int(d) for d in dims))  # all 0 when the kernel sets no cluster size


def resident_blocks(function: Any, source: KernelSource, sm_count: int) -> int:
    """How many blocks of `function` the GPU holds at once, by the driver's occupancy calculator
    (call after the dynamic shared memory opt-in): blocks per SM × SMs, or with clusters, the
    clusters that fit at once × their size."""
    cu = driver()
    cluster = cluster_size(function)
    if cluster == 1:
        per_sm = checked(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, source.threads, source.dynamic_smem),
                         f"cuOccupancyMaxActiveBlocksPerMultiprocessor({source.entry})")
        return int(per_sm) * sm_count
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = source.grid
    config.blockDimX, config.blockDimY, config.blockDimZ = source.block
    config.sharedMemBytes = source.dynamic_smem
    clusters = checked(cu.cuOccupancyMaxActiveClusters(function, config), f"cuOccupancyMaxActiveClusters({source.entry})")
    return int(clusters) * cluster


# --- kernel arguments --------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelArguments:
    """cuLaunchKernel's `void** kernelParams`: one pointer per parameter to a copy of its value.

    The objects in `values` (ctypes scalars, CUtensorMaps) live as long as this value; the driver
    copies them at launch.
    """

    values: tuple[Any, ...]
    pointers: ctypes.Array

    @property
    def address(self) -> int:
        return ctypes.addressof(self.pointers)


def _address_of(value: Any) -> int:
    return value.getPtr() if hasattr(value, "getPtr") else ctypes.addressof(value)


def pack_arguments(names: tuple[str, ...], bindings: Mapping[str, Any], entry: str = "kernel",
                   tensor_maps: tuple[TensorMapArg, ...] = (),
                   encode: Callable[[TensorMapArg, int], Any] = encode_tensor_map) -> KernelArguments:
    """Pack `bindings` in parameter order: alpha/beta as float32, a tensor-map parameter as the
    128-byte TMA descriptor of its operand's pointer (made by `encode`: a loaded kernel passes its
    TensorMapCache), every other parameter as a void* (the GEMM operands, and buffers such as a TVM
    launch sequence's intermediates)."""
    maps = {t.name: t for t in tensor_maps}
    values: list[Any] = []
    for name in names:
        key = maps[name].operand if name in maps else name
        if key not in bindings:
            raise SpecError(f"{entry} takes argument '{name}' but no value was bound to {key!r}")
        value = bindings[key]
        if name in SCALAR_ARGS:
            values.append(ctypes.c_float(float(value)))
            continue
        ptr = int(value)  # ints and DeviceBuffers
        if ptr == 0:
            raise SpecError(f"{entry}: argument '{name}' is a null pointer")
        values.append(encode(maps[name], ptr) if name in maps else ctypes.c_void_p(ptr))
    return _packed(values)


class TensorMapCache:
    """The tensor maps a loaded kernel has encoded, by (descriptor, pointer): a bind whose weight (or
    any operand) sits where it sat before reuses its 128 bytes instead of calling cuTensorMapEncodeTiled
    again. A map is a value (the kernel parameter is a copy taken at launch), so launches can share one.
    Holds at most `capacity`; the least recently used goes first."""

    def __init__(self, capacity: int = 256):
        self.capacity = capacity
        self._maps: OrderedDict[tuple[TensorMapArg, int], Any] = OrderedDict()
        self.encoded = 0  # misses, for tests and plan statistics

    def __call__(self, desc: TensorMapArg, pointer: int) -> Any:
        key = (desc, pointer)
        found = self._maps.get(key)
        if found is not None:
            self._maps.move_to_end(key)
            return found
        made = encode_tensor_map(desc, pointer)
        self.encoded += 1
        self._maps[key] = made
        if len(self._maps) > self.capacity:
            self._maps.popitem(last=False)
        return made

    def __len__(self) -> int:
        return len(self._maps)


def _packed(values: list[Any]) -> KernelArguments:
    """`values` in parameter order, with the array of their addresses cuLaunchKernel reads."""
    pointers = (ctypes.c_void_p * max(1, len(values)))(*[_address_of(v) for v in values])
    return KernelArguments(tuple(values), pointers)


@dataclass(frozen=True)
class StagingCopy:
    """One staged operand's copy into its workspace (cuMemcpy2DAsync: the caller's contiguous rows to
    rows `pitch` bytes apart), enqueued before the kernel on the launch's stream."""

    params: Any  # CUDA_MEMCPY2D
    what: str

    def __call__(self, stream: Any) -> None:
        checked(driver().cuMemcpy2DAsync(self.params, stream), self.what)


def staging_copy(staged: StagedOperand, source: int, workspace: int) -> StagingCopy:
    cu = driver()
    p = cu.CUDA_MEMCPY2D()
    p.srcMemoryType = p.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    p.srcDevice, p.srcPitch = source, staged.row_bytes
    p.dstDevice, p.dstPitch = workspace, staged.pitch
    p.WidthInBytes, p.Height = staged.row_bytes, staged.rows
    return StagingCopy(p, f"staging {staged.operand} ({staged.rows} rows of {staged.row_bytes} B to a {staged.pitch}-B pitch)")


@dataclass(frozen=True)
class StageLaunch:
    """The staging kernel's launch (kernels/parts/staging.py): every staged operand copied into its
    workspace, enqueued before the GEMM on the launch's stream."""

    function: Any
    arguments: KernelArguments
    grid: tuple[int, int, int]
    what: str

    def __call__(self, stream: Any) -> None:
        result = driver().cuLaunchKernel(self.function, *self.grid, staging.THREADS, 1, 1, 0, stream,
                                         self.arguments.address, 0)
        checked(result, self.what)


def pointer_arguments(pointers: list[int]) -> KernelArguments:
    """cuLaunchKernel's parameters for a kernel that takes only pointers."""
    return _packed([ctypes.c_void_p(p) for p in pointers])


def dependent_launch_config(source: KernelSource, stream: Any) -> Any:
    """cuLaunchKernelEx's configuration for `source` on `stream` with programmatic stream
    serialization allowed: the kernel may start before the one ahead of it on the stream has finished
    (it waits for it itself: kernels/parts/dependent_launch.py)."""
    cu = driver()
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = source.grid
    config.blockDimX, config.blockDimY, config.blockDimZ = source.block
    config.sharedMemBytes = source.dynamic_smem
    config.hStream = stream
    attribute = cu.CUlaunchAttribute()
    attribute.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attribute.value.programmaticStreamSerializationAllowed = 1
    config.attrs = [attribute]
    config.numAttrs = 1
    return config


@dataclass(frozen=True)
class BoundLaunch:
    """One kernel with its arguments packed once: calling it only enqueues the launch (after the
    copies of its staged operands, when it has any; after the kernel's last launch, when that was on
    another stream and the kernel keeps state between launches: `order`)."""

    function: Any
    source: KernelSource
    arguments: KernelArguments
    stream: Any = 0
    copies: tuple[StagingCopy | StageLaunch, ...] = ()
    dependent: Any = None  # dependent_launch_config's result: launched with cuLaunchKernelEx
    order: StreamOrder | None = None  # the loaded kernel's, where it keeps state (stream_order.py)

    def __post_init__(self) -> None:
        # What every call passes to the driver, worked out once (a launch is in the eager path of every
        # torch call): the driver function's name, its arguments, and the error's text.
        src = self.source
        if self.dependent is not None:
            name, params = "cuLaunchKernelEx", (self.dependent, self.function, self.arguments.address, 0)
        else:
            name, params = "cuLaunchKernel", (self.function, *src.grid, *src.block, src.dynamic_smem, self.stream,
                                              self.arguments.address, 0)
        object.__setattr__(self, "_launch", (name, params, f"launching {src.entry}"))

    def __call__(self) -> None:
        if self.order is None:
            self._enqueue()
            return
        with self.order.launching(self.stream):
            self._enqueue()

    def _enqueue(self) -> None:
        for copy in self.copies:
            copy(self.stream)
        name, params, what = self._launch
        result = getattr(_driver_module(), name)(*params)
        if result[0]:  # CUDA_SUCCESS is 0
            checked(result, what)


def _driver_module() -> Any:
    """cuda.bindings.driver as device.driver() gives it (tests put a fake there), by one attribute read
    once the package is imported rather than an import statement a call."""
    package = _bindings[0]
    if package is None:
        driver()  # imports it, or says it is not installed
        import cuda.bindings as package

        _bindings[0] = package
    return package.driver


_bindings: list[Any] = [None]


class LoadedKernel:
    """A compiled kernel loaded into the primary context. Call unload() (or use `with`) when done."""

    def __init__(self, compiled: CompiledKernel, ordinal: int = 0):
        info = query_device(ordinal)
        ensure_context(ordinal)
        problem = arch_problem(compiled.arch, info)
        if problem:
            raise LaunchError(problem)
        problems = resource_problems(compiled, info)
        if problems:
            raise ResourceError(f"{compiled.source.entry}: " + "; ".join(problems))
        self.compiled = compiled
        self.source = compiled.source
        self._workspaces: dict[str, DeviceBuffer] = {}  # staged operand -> its workspace
        self._dependent_configs: dict[int, Any] = {}  # stream handle -> dependent_launch_config's result
        self.tensor_maps = TensorMapCache()  # encoded once per (descriptor, operand pointer)
        # Module memory (split-K partials, flags) or staging workspaces that every launch uses: a launch on
        # another stream than the last waits for it (stream_order.py); kernels whose blocks wait on each
        # other share one order per GPU, so that two of them never split the SMs between their grids.
        self._order = (shared_order(ordinal) if compiled.source.co_resident
                       else StreamOrder() if compiled.source.keeps_state else None)
        self.module = checked(driver().cuModuleLoadData(compiled.cubin), "cuModuleLoadData")
        try:
            self.function = self._get_function()
            # The staging kernel beside it (kernels/parts/staging.py), looked up once here, not per bind.
            self.stage_function = self._get_stage_function() if self.source.stage_kernel else None
            if self.source.co_resident:
                self._check_co_residency(info)
        except (LaunchError, ResourceError):
            release([self.unload], after_error=True)
            raise

    def _check_co_residency(self, info: DeviceInfo) -> None:
        src = self.source
        held = resident_blocks(self.function, src, info.sm_count)
        problem = co_residency_problem(math.prod(src.grid), held, src.entry)
        if problem:
            raise ResourceError(problem)

    def _get_function(self) -> Any:
        cu = driver()
        entry = self.source.entry
        function = checked(cu.cuModuleGetFunction(self.module, entry.encode()), f"cuModuleGetFunction({entry})")
        if self.source.dynamic_smem > 0:
            # Blocks get 48 KiB of shared memory unless the kernel opts in to more.
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            checked(cu.cuFuncSetAttribute(function, attr, self.source.dynamic_smem),
                    f"opting {entry} in to {self.source.dynamic_smem} B of dynamic shared memory")
        if self.source.cluster_blocks > PORTABLE_CLUSTER_BLOCKS:
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            checked(cu.cuFuncSetAttribute(function, attr, 1),
                    f"allowing {entry} clusters of {self.source.cluster_blocks} blocks (non-portable size)")
        return function

    def bind(self, bindings: Mapping[str, Any], stream: Any = 0, dependent_launch: bool = True) -> BoundLaunch:
        """Pack `bindings` (name -> device pointer int / DeviceBuffer, or float) for repeated launches.
        A staged operand's tensor maps describe this kernel's workspace for it, which each launch
        fills first. Launches of one loaded kernel share that workspace and the kernel's module memory
        (split-K partials and flags), so a launch on another stream than the last waits for it
        (stream_order.py). A kernel with the dependent-launch prologue is launched so that it
        overlaps the kernel before it, unless `dependent_launch` is False (then it runs as any other)."""
        copies: list[StagingCopy | StageLaunch] = []
        if self.source.staged:
            bindings = dict(bindings)
            pointers = []
            for staged in self.source.staged:
                if staged.operand not in bindings:
                    raise SpecError(f"{self.source.entry} takes argument '{staged.operand}' but no value was bound")
                source, workspace = int(bindings[staged.operand]), self._workspace(staged).ptr
                if source == 0:
                    raise SpecError(f"{self.source.entry}: argument '{staged.operand}' is a null pointer")
                pointers += [source, workspace]
                if not self.source.stage_kernel:
                    copies.append(staging_copy(staged, source, workspace))
                bindings[staged.operand] = workspace
            if self.source.stage_kernel:
                copies.append(StageLaunch(self.stage_function, pointer_arguments(pointers),
                                          staging.stage_grid(self.source.staged),
                                          f"launching {staging.stage_entry(self.source.entry)}"))
        args = pack_arguments(self.source.args, bindings, self.source.entry, self.source.tensor_maps,
                              self.tensor_maps)
        dependent = self._dependent_config(stream) if dependent_launch and self.source.dependent_launch else None
        return BoundLaunch(self.function, self.source, args, stream, tuple(copies), dependent, self._order)

    def _dependent_config(self, stream: Any) -> Any:
        """dependent_launch_config for `stream`, built once per stream: the torch path binds at every
        call, and building it costs ~20 µs of Python."""
        key = int(stream)
        if key not in self._dependent_configs:
            self._dependent_configs[key] = dependent_launch_config(self.source, stream)
        return self._dependent_configs[key]

    def _get_stage_function(self) -> Any:
        name = staging.stage_entry(self.source.entry)
        return checked(driver().cuModuleGetFunction(self.module, name.encode()), f"cuModuleGetFunction({name})")

    def _workspace(self, staged: StagedOperand) -> DeviceBuffer:
        """The staged operand's workspace, allocated at the first bind (so not while a CUDA graph is
        being captured, when the kernel was launched once before) and freed by unload()."""
        if staged.operand not in self._workspaces:
            self._workspaces[staged.operand] = DeviceBuffer.alloc(staged.workspace_bytes)
        return self._workspaces[staged.operand]

    def launch(self, bindings: Mapping[str, Any], stream: Any = 0) -> None:
        """Enqueue one launch; faults surface at the next synchronize()."""
        self.bind(bindings, stream)()

    def unload(self) -> None:
        workspaces, self._workspaces = self._workspaces, {}
        for buffer in workspaces.values():
            buffer.free()
        if self._order is not None and not self.source.co_resident:  # a shared order outlives its kernels
            self._order.close()
        if self.module is not None:
            module, self.module = self.module, None
            checked(driver().cuModuleUnload(module), "cuModuleUnload")

    def __enter__(self) -> "LoadedKernel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.unload()


def release(closers: Iterable[Callable[[], None]], after_error: bool) -> None:
    """Run every closer (free, unload, ...). After an error, a closer's own LaunchError is dropped:
    the first error is the one to report, and a lost context makes every later call fail too."""
    for close in closers:
        try:
            close()
        except LaunchError:
            if not after_error:
                raise


def synchronize() -> None:
    """Wait for all work in the context; kernel faults are reported here as LaunchError."""
    checked(driver().cuCtxSynchronize(), "kernel execution")
