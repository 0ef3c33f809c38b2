"""TVM targets for gemmtune's architectures (TVM 0.27 spells targets as dicts or tags)."""
from __future__ import annotations

from typing import Any

from ..compiler import ARCHES
from ..errors import ConfigError

# Limits every gemmtune architecture (sm_80 ... sm_90a) shares. MetaSchedule needs them on the
# target (its AutoBind rule and VerifyGPUCode postprocessor read them); 48 KiB is the static
# shared memory a kernel may declare, which is what TVM's "shared" scope and NVRTC give us.
CUDA_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 48 * 1024,
               "registers_per_block": 65536, "thread_warp_size": 32}


def cuda_target(arch: str = "sm_90") -> Any:
    """A CUDA target for `arch` with an llvm host; building with it only generates code (no GPU)."""
    import tvm

    if arch not in ARCHES:
        raise ConfigError(f"unknown arch '{arch}'; choose one of {', '.join(ARCHES)}")
    return tvm.target.Target({"kind": "cuda", "arch": arch, **CUDA_LIMITS}, host="llvm")


def cpu_target() -> Any:
    """The llvm target, to run unscheduled workloads on the CPU against numpy."""
    import tvm

    return tvm.target.Target("llvm")
