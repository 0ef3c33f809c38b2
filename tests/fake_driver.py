"""A stand-in for cuda.bindings.driver so the runtime's logic runs on a machine without a GPU.

"Device" memory is host memory (pointers are real host addresses), kernels are Python functions
registered by entry name that read their arguments from the packed kernelParams, and events read
a clock. The enums are the real ones. Only what gemmtune calls is here.
"""
from __future__ import annotations

import ctypes
import itertools
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
from cuda.bindings import driver as real

CUresult = real.CUresult
OK = CUresult.CUDA_SUCCESS

ATTRIBUTES = {
    "COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0, "MULTIPROCESSOR_COUNT": 132,
    "MAX_THREADS_PER_BLOCK": 1024, "MAX_SHARED_MEMORY_PER_BLOCK": 49152,
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 233472,
    "MAX_REGISTERS_PER_BLOCK": 65536, "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536, "L2_CACHE_SIZE": 1 << 20,
}

Kernel = Callable[[int], None]  # receives the kernelParams address


@contextmanager
def installed(monkeypatch: Any, driver: "FakeDriver") -> Iterator["FakeDriver"]:
    """`driver` in place of cuda.bindings.driver, gemmtune.device's cached lookups cleared before and
    after (they would otherwise keep the real driver's, or this one's, answers)."""
    import cuda.bindings

    from gemmtune import device

    caches = (device._init_driver, device._primary_context, device.query_device, device.device_uuid)
    monkeypatch.setattr(cuda.bindings, "driver", driver)
    for cached in caches:
        cached.cache_clear()
    try:
        yield driver
    finally:
        for cached in caches:
            cached.cache_clear()


def param_pointer(params: int, index: int) -> int:
    slot = (ctypes.c_void_p * (index + 1)).from_address(params)[index]
    return ctypes.c_void_p.from_address(slot).value


def param_float(params: int, index: int) -> float:
    slot = (ctypes.c_void_p * (index + 1)).from_address(params)[index]
    return ctypes.c_float.from_address(slot).value


def device_array(ptr: int, shape: tuple[int, ...], ctype: type = ctypes.c_float) -> np.ndarray:
    """A numpy view of fake device memory (ctype: c_float, or c_uint16 for 16-bit storage)."""
    count = int(np.prod(shape))
    return np.ctypeslib.as_array((ctype * count).from_address(ptr)).reshape(shape)


class FakeUuid:
    def __init__(self, raw: bytes):
        self.bytes = raw


class FakeDriver:
    CUresult = real.CUresult
    CUdevice_attribute = real.CUdevice_attribute
    CUfunction_attribute = real.CUfunction_attribute
    CUevent_flags = real.CUevent_flags
    CUlaunchConfig = real.CUlaunchConfig

    def __init__(self, kernels: dict[str, Kernel] | None = None):
        self.kernels = dict(kernels or {})
        self.memory: dict[int, np.ndarray] = {}
        self.calls: list[str] = []
        self.pending_error: CUresult | None = None  # reported at the next synchronize, like a fault
        self.events_alive = 0
        self.recorded_on: list[int] = []  # the stream of every cuEventRecord
        self.context = 0
        self.modules_alive = 0
        self._ids = itertools.count(1)
        # The occupancy calculator's answers: blocks per SM, the kernel's __cluster_dims__ (0: none)
        # and how many of its clusters fit at once.
        self.blocks_per_sm = 1
        self.cluster_dims = (0, 0, 0)
        self.active_clusters = 0

    # device and context
    def cuInit(self, flags): return (OK,)
    def cuDeviceGetCount(self): return (OK, 1)
    def cuDeviceGet(self, ordinal): return (OK, ordinal)
    def cuDevicePrimaryCtxRetain(self, dev): return (OK, 0x5000 + dev)
    def cuCtxGetCurrent(self): return (OK, self.context)

    def cuCtxGetDevice(self): return (OK, 0)
    def cuDeviceGetUuid(self, dev): return (OK, FakeUuid(b"fake-gpu-uuid-00"))

    def cuCtxSetCurrent(self, ctx):
        self.context = ctx
        return (OK,)
    def cuDriverGetVersion(self): return (OK, 12080)
    def cuDeviceGetName(self, length, dev): return (OK, b"Fake H100\x00\x00")
    def cuDeviceTotalMem(self, dev): return (OK, 80 << 30)
    def cuMemGetInfo(self): return (OK, 79 << 30, 80 << 30)

    def cuDeviceGetAttribute(self, attr, dev):
        return (OK, ATTRIBUTES[attr.name.removeprefix("CU_DEVICE_ATTRIBUTE_")])

    # memory: device pointers are 256-aligned host addresses
    def cuMemAlloc(self, nbytes):
        backing = np.zeros(nbytes + 256, np.uint8)
        ptr = (backing.ctypes.data + 255) // 256 * 256
        self.memory[ptr] = backing
        return (OK, ptr)

    def cuMemFree(self, ptr):
        del self.memory[int(ptr)]
        return (OK,)

    def cuMemcpyHtoD(self, dst, src, nbytes):
        ctypes.memmove(int(dst), int(src), nbytes)
        return (OK,)

    def cuMemcpyDtoH(self, dst, src, nbytes):
        ctypes.memmove(int(dst), int(src), nbytes)
        return (OK,)

    def cuMemsetD32(self, ptr, value, words):
        np.ctypeslib.as_array((ctypes.c_uint32 * words).from_address(int(ptr)))[:] = value
        return (OK,)

    def cuMemsetD16(self, ptr, value, halves):
        np.ctypeslib.as_array((ctypes.c_uint16 * halves).from_address(int(ptr)))[:] = value
        return (OK,)

    def cuMemsetD32Async(self, ptr, value, words, stream):
        self.calls.append("memset")
        return self.cuMemsetD32(ptr, value, words)

    # modules and launches
    def cuModuleLoadData(self, image):
        self.modules_alive += 1
        return (OK, next(self._ids))

    def cuModuleUnload(self, module):
        self.modules_alive -= 1
        return (OK,)

    def cuModuleGetFunction(self, module, name):
        entry = name.decode()
        return (OK, entry) if entry in self.kernels else (CUresult.CUDA_ERROR_NOT_FOUND, None)

    def cuFuncSetAttribute(self, function, attr, value):
        self.calls.append(f"set {attr.name}={value}")
        return (OK,)

    def cuFuncGetAttribute(self, attr, function):
        axis = attr.name.removeprefix("CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_")
        return (OK, self.cluster_dims[("WIDTH", "HEIGHT", "DEPTH").index(axis)])

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, function, threads, smem):
        self.calls.append(f"occupancy threads={threads} smem={smem}")
        return (OK, self.blocks_per_sm)

    def cuOccupancyMaxActiveClusters(self, function, config):
        self.calls.append(f"cluster occupancy grid={config.gridDimX} smem={config.sharedMemBytes}")
        return (OK, self.active_clusters)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.calls.append("launch")
        self.kernels[f](params)
        return (OK,)

    def _sync(self):
        error, self.pending_error = self.pending_error, None
        return (error or OK,)

    def cuCtxSynchronize(self): return self._sync()
    def cuStreamSynchronize(self, stream): return self._sync()

    # events
    def cuEventCreate(self, flags):
        self.events_alive += 1
        return (OK, [0.0])

    def cuEventDestroy(self, event):
        self.events_alive -= 1
        return (OK,)

    def cuEventRecord(self, event, stream):
        self.calls.append("record")
        self.recorded_on.append(int(stream or 0))
        event[0] = time.perf_counter()
        return (OK,)

    # streams: `capturing` holds the handles of the streams being captured into a graph now
    CUstreamCaptureStatus = real.CUstreamCaptureStatus
    capturing: frozenset = frozenset()

    def cuStreamIsCapturing(self, stream):
        status = self.CUstreamCaptureStatus
        return (OK, status.CU_STREAM_CAPTURE_STATUS_ACTIVE if int(stream) in self.capturing
                else status.CU_STREAM_CAPTURE_STATUS_NONE)

    def cuStreamWaitEvent(self, stream, event, flags):
        self.calls.append(f"{int(stream)} waits")
        return (OK,)

    def cuEventSynchronize(self, event): return self._sync()
    def cuEventQuery(self, event): return (OK,)  # launches run at once here: every event is done

    def cuEventElapsedTime(self, start, end):
        return (OK, (end[0] - start[0]) * 1e3)
