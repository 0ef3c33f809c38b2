"""The GPU as the driver API sees it: what it offers, and the one context every call runs in.

We use the device's *primary* context, the one the CUDA runtime (and so torch and cupy) uses,
so device pointers from those libraries are valid in our launches and ours in theirs.
"""
from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass
from typing import Any

from .errors import GemmtuneError, LaunchError, NoDeviceError


@dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    cc: tuple[int, int]  # compute capability (major, minor)
    sm_count: int
    max_threads_per_block: int
    smem_per_block: int  # bytes a block gets without opting in (48 KiB)
    smem_per_block_optin: int  # bytes a block may get after cuFuncSetAttribute
    smem_per_sm: int
    regs_per_block: int
    regs_per_sm: int
    l2_bytes: int
    total_memory: int
    driver_version: str  # "12.8": the newest CUDA the driver supports

    @property
    def arch(self) -> str:
        """'sm_90' for compute capability 9.0 (families add the 'a' suffix themselves)."""
        return f"sm_{self.cc[0]}{self.cc[1]}"

    def to_json(self) -> dict:
        data = asdict(self)
        data["cc"] = list(self.cc)
        data["arch"] = self.arch
        return data

    @staticmethod
    def from_json(data: dict) -> "DeviceInfo":
        fields = {k: v for k, v in data.items() if k != "arch"}
        fields["cc"] = tuple(fields["cc"])
        return DeviceInfo(**fields)

    def summary(self) -> str:
        return (f"{self.name} ({self.arch}, {self.sm_count} SMs, {self.total_memory / 2**30:.0f} GiB, "
                f"L2 {self.l2_bytes / 2**20:.0f} MiB, driver CUDA {self.driver_version})")


# --- driver calls ------------------------------------------------------------------------------
def driver():
    """The cuda.bindings driver module (imported lazily: importing gemmtune must not need it)."""
    try:
        from cuda.bindings import driver as cu
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise NoDeviceError("cuda-bindings is not installed: pip install cuda-bindings") from exc
    return cu


def error_name(code: Any) -> str:
    """'CUDA_ERROR_ILLEGAL_ADDRESS' for a CUresult, without calling the driver."""
    cu = driver()
    try:
        return cu.CUresult(int(code)).name
    except ValueError:
        return f"CUresult {int(code)}"


# Errors after which the context is corrupt: every later call in this process fails too.
STICKY_ERRORS = frozenset({
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT",
})


def checked(result: Any, what: str, error: type[GemmtuneError] = LaunchError) -> Any:
    """Unpack a cuda.bindings result tuple (err, *values); raise `error` naming the CUresult."""
    code, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if int(code) != 0:
        name = error_name(code)
        hint = "; the CUDA context is lost, restart the process" if name in STICKY_ERRORS else ""
        raise error(f"{what} failed: {name}{hint}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


# --- the primary context -----------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _init_driver() -> None:
    cu = driver()
    try:
        result = cu.cuInit(0)
    except RuntimeError as exc:  # cuda.pathfinder raises this when libcuda.so is absent
        raise NoDeviceError("no NVIDIA driver found (libcuda.so is missing); a CUDA GPU is needed") from exc
    checked(result, "cuInit", NoDeviceError)
    if checked(cu.cuDeviceGetCount(), "cuDeviceGetCount", NoDeviceError) < 1:
        raise NoDeviceError("the NVIDIA driver sees no CUDA GPU")


@functools.lru_cache(maxsize=None)
def _primary_context(ordinal: int) -> Any:
    # Retained once and never released: it lives as long as the process, like torch's.
    cu = driver()
    dev = _device_handle(ordinal)
    return checked(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain", NoDeviceError)


def _device_handle(ordinal: int) -> Any:
    _init_driver()
    cu = driver()
    count = checked(cu.cuDeviceGetCount(), "cuDeviceGetCount", NoDeviceError)
    if not 0 <= ordinal < count:
        raise NoDeviceError(f"GPU {ordinal} does not exist; this machine has {count}")
    return checked(cu.cuDeviceGet(ordinal), "cuDeviceGet", NoDeviceError)


def ensure_context(ordinal: int | None = None) -> None:
    """Make the primary context of GPU `ordinal` current on this thread (contexts are per thread).

    With no ordinal, keep whatever context is current (a kernel loaded on GPU 1 stays on GPU 1)
    and fall back to GPU 0's only when the thread has none.
    """
    cu = driver()
    if ordinal is None:
        _init_driver()
        if int(checked(cu.cuCtxGetCurrent(), "cuCtxGetCurrent", NoDeviceError)):
            return
        ordinal = 0
    checked(cu.cuCtxSetCurrent(_primary_context(ordinal)), "cuCtxSetCurrent", NoDeviceError)


# --- queries -----------------------------------------------------------------------------------
def _attribute(dev: Any, name: str) -> int:
    cu = driver()
    attr = getattr(cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
    return int(checked(cu.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({name})", NoDeviceError))


def _c_string(raw: bytes | str) -> str:
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    return text.split("\x00", 1)[0].strip()


def _driver_version() -> str:
    version = int(checked(driver().cuDriverGetVersion(), "cuDriverGetVersion", NoDeviceError))
    return f"{version // 1000}.{version % 1000 // 10}"


@functools.lru_cache(maxsize=None)
def query_device(ordinal: int = 0) -> DeviceInfo:
    """What GPU `ordinal` offers; raises NoDeviceError (one line) without a driver or GPU."""
    cu = driver()
    dev = _device_handle(ordinal)
    raw_name = checked(cu.cuDeviceGetName(256, dev), "cuDeviceGetName", NoDeviceError)
    return DeviceInfo(
        ordinal=ordinal,
        name=_c_string(raw_name),
        cc=(_attribute(dev, "COMPUTE_CAPABILITY_MAJOR"), _attribute(dev, "COMPUTE_CAPABILITY_MINOR")),
        sm_count=_attribute(dev, "MULTIPROCESSOR_COUNT"),
        max_threads_per_block=_attribute(dev, "MAX_THREADS_PER_BLOCK"),
        smem_per_block=_attribute(dev, "MAX_SHARED_MEMORY_PER_BLOCK"),
        smem_per_block_optin=_attribute(dev, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        smem_per_sm=_attribute(dev, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
        regs_per_block=_attribute(dev, "MAX_REGISTERS_PER_BLOCK"),
        regs_per_sm=_attribute(dev, "MAX_REGISTERS_PER_MULTIPROCESSOR"),
        l2_bytes=_attribute(dev, "L2_CACHE_SIZE"),
        total_memory=int(checked(cu.cuDeviceTotalMem(dev), "cuDeviceTotalMem", NoDeviceError)),
        driver_version=_driver_version(),
    )


def gpu_available() -> bool:
    """True when a driver and at least one GPU answer; never raises."""
    try:
        _init_driver()
    except GemmtuneError:
        return False
    return True


def visible_gpus() -> list[str]:
    """The GPUs this process may use, each as the value that pins a child process to it through
    CUDA_VISIBLE_DEVICES: that variable's own entries where it is set (so `CUDA_VISIBLE_DEVICES=2,3`
    gives workers GPUs 2 and 3), else the driver's ordinals; [] without a driver or GPU. Never raises."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        entries = [entry.strip() for entry in listed.split(",")]
        for i, entry in enumerate(entries):  # CUDA ignores an invalid entry (-1, empty) and all after it
            if not entry or entry.startswith("-"):
                return entries[:i]
        return entries
    if not gpu_available():
        return []
    return [str(i) for i in range(int(checked(driver().cuDeviceGetCount(), "cuDeviceGetCount", NoDeviceError)))]


def present_device(ordinal: int = 0) -> DeviceInfo | None:
    """The GPU's DeviceInfo, or None on a machine without one (never raises NoDeviceError)."""
    return query_device(ordinal) if gpu_available() else None


@functools.lru_cache(maxsize=None)
def device_uuid(ordinal: int = 0) -> str:
    """'GPU-3f2a…' as nvidia-smi prints it: stable across processes and CUDA_VISIBLE_DEVICES orders."""
    cu = driver()
    raw = checked(cu.cuDeviceGetUuid(_device_handle(ordinal)), "cuDeviceGetUuid", NoDeviceError).bytes
    text = bytes(raw).hex() if isinstance(raw, (bytes, bytearray)) else "".join(f"{ord(c) & 0xFF:02x}" for c in raw)
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"


def current_ordinal() -> int:
    """The ordinal of the GPU whose context is current on this thread (GPU 0's made current if none)."""
    ensure_context()
    return int(checked(driver().cuCtxGetDevice(), "cuCtxGetDevice", NoDeviceError))


def free_memory(ordinal: int = 0) -> int:
    """Bytes of device memory free right now on GPU `ordinal` (whose context becomes current)."""
    ensure_context(ordinal)
    free, _total = checked(driver().cuMemGetInfo(), "cuMemGetInfo", NoDeviceError)
    return int(free)
