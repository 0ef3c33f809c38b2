"""What a GPU of each arch offers the schedule: SMs, shared memory, registers, threads.

The one place the SM count of a GPU is written down. A present device answers for itself
(`geometry(device, arch)` takes its DeviceInfo); offline, the arch table stands in with a typical
GPU of that arch, named beside its numbers. Code that needs an SM count takes it from a Geometry
passed to it, never from a literal.

    gpu = geometry(present_device(), "sm_90a")   # the GPU's own numbers, or the table's H100 SXM
    gpu.sm_count, gpu.smem_per_block, gpu.cluster_grid(2)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .errors import ConfigError

KIB = 1024


@dataclass(frozen=True)
class ArchLimits:
    """One arch's typical GPU (`gpu`) and the per-block and per-SM limits of its compute capability."""

    arch: str
    gpu: str  # the GPU whose SM count this is
    sm_count: int
    smem_per_block: int  # dynamic shared memory one block may opt in to (bytes)
    smem_per_sm: int  # shared memory of one SM (bytes)
    regs_per_sm: int  # 32-bit registers of one SM
    threads_per_sm: int  # resident threads per SM
    blocks_per_sm: int  # resident blocks per SM
    # (cluster size, blocks of the largest grid of such clusters that always fits), as the driver's
    # cuOccupancyMaxActiveClusters counted it on `gpu`: clusters stay within a GPC, and GPCs of uneven
    # size leave some SMs out (H100 SXM and H200: 66 pairs, 30 clusters of 4).
    cluster_blocks: tuple[tuple[int, int], ...] = ()


ARCH_TABLE: dict[str, ArchLimits] = {limits.arch: limits for limits in (
    ArchLimits("sm_75", "Tesla T4", 40, 64 * KIB, 64 * KIB, 65536, 1024, 16),
    ArchLimits("sm_80", "A100 SXM", 108, 163 * KIB, 164 * KIB, 65536, 2048, 32),
    ArchLimits("sm_86", "A40 (a full GA102, as the RTX 3090 Ti and RTX A6000)", 84, 99 * KIB, 100 * KIB, 65536, 1536, 16),
    ArchLimits("sm_89", "L40S", 142, 99 * KIB, 100 * KIB, 65536, 1536, 24),
    ArchLimits("sm_90", "H100 SXM (and H200)", 132, 227 * KIB, 228 * KIB, 65536, 2048, 32,
               cluster_blocks=((2, 132), (4, 120))),
    ArchLimits("sm_100", "B200", 148, 227 * KIB, 228 * KIB, 65536, 2048, 32),
    ArchLimits("sm_120", "GeForce RTX 5090", 170, 99 * KIB, 100 * KIB, 65536, 1536, 32),
)}


def base_arch(arch: str) -> str:
    """'sm_90a' -> 'sm_90' (the a/f feature suffixes change no limit)."""
    return arch.rstrip("af") if arch.startswith("sm_") else arch


def known_arch(arch: str) -> bool:
    return base_arch(arch) in ARCH_TABLE


def device_of_arch(device: Any | None, arch: str) -> Any | None:
    """`device` where it is a GPU of `arch` (sm_90 and sm_90a alike), else None: a kernel built for another
    GPU (an H200 building for a T4's sm_75) is chosen with that arch's table, not the present GPU's SM
    count, shared memory or tuning records. A device that names no arch is kept."""
    if device is None or getattr(device, "arch", None) is None:
        return device
    return device if base_arch(device.arch) == base_arch(arch) else None


def arch_limits(arch: str) -> ArchLimits:
    limits = ARCH_TABLE.get(base_arch(arch))
    if limits is None:
        raise ConfigError(f"no GPU geometry known for {arch}; known: {', '.join(ARCH_TABLE)}")
    return limits


@dataclass(frozen=True)
class Geometry:
    """The GPU a kernel is scheduled for: a present device's numbers, or the arch table's."""

    arch: str
    sm_count: int
    smem_per_block: int
    smem_per_sm: int
    regs_per_sm: int
    threads_per_sm: int
    blocks_per_sm: int
    source: str  # "device <name>" or "arch table: <gpu>"
    cluster_blocks: tuple[tuple[int, int], ...] = ()  # measured on a GPU with this sm_count (see ArchLimits)

    def cluster_grid(self, cluster_m: int) -> int:
        """Blocks of the largest grid of clusters of `cluster_m` that always fits at once: as measured
        where known, else every SM's worth of whole clusters."""
        if cluster_m <= 1:
            return self.sm_count
        return dict(self.cluster_blocks).get(cluster_m, self.sm_count // cluster_m * cluster_m)


def geometry(device: Any | None, arch: str, sm_count: int | None = None) -> Geometry:
    """The geometry of `device` (a DeviceInfo, or None offline) for kernels built for `arch`.

    The device's SM count and shared-memory limits where it is present and of `arch`, the table's for the others;
    `sm_count` stands for a GPU of the arch with that many SMs (a recorded environment, the chooser
    asked about another GPU). Cluster capacities measured on the table's GPU are kept only for a GPU
    with its SM count."""
    limits = arch_limits(arch)
    device = device_of_arch(device, arch)
    gpu = Geometry(base_arch(arch), limits.sm_count, limits.smem_per_block, limits.smem_per_sm, limits.regs_per_sm,
                   limits.threads_per_sm, limits.blocks_per_sm, f"arch table: {limits.gpu}", limits.cluster_blocks)
    if device is not None:
        gpu = replace(gpu, sm_count=int(getattr(device, "sm_count", 0) or gpu.sm_count),
                      source=f"device {getattr(device, 'name', '(unnamed)')}",
                      smem_per_block=int(getattr(device, "smem_per_block_optin", 0) or gpu.smem_per_block),
                      smem_per_sm=int(getattr(device, "smem_per_sm", 0) or gpu.smem_per_sm),
                      regs_per_sm=int(getattr(device, "regs_per_sm", 0) or gpu.regs_per_sm))
    if sm_count is not None:
        gpu = replace(gpu, sm_count=int(sm_count))
    if gpu.sm_count != limits.sm_count:
        gpu = replace(gpu, cluster_blocks=())
    return gpu
