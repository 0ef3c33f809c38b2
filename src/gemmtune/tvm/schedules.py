"""The TVM schedules gemmtune offers by name, each ending in a KernelSource.

    naive      ladder row 0: one thread per output (a GEMM with an epilogue emits two kernels)
    manual     bind_threads + all five steps, with given or default tiles
    dlight     TVM's default GPU schedule (no tuning)
    tuned      a tuned schedule: a saved apply_trace file, or the best record of a work dir
    <row>      any ladder row by name (shared_memory, register_tiling, ...)
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..kernel_source import KernelSource
from ..spec import GemmSpec
from . import ladder, tuning
from .convert import kernel_source
from .tiles import Tiles

SCHEDULES = ("naive", "manual", "dlight", "tuned")


@dataclass(frozen=True)
class TunedFrom:
    """Where a tuned schedule comes from: a saved trace file, else a work dir's database."""

    trace: Path | None = None
    work_dir: Path | None = None


@dataclass(frozen=True)
class Named:
    name: str
    mod: Any  # the scheduled IRModule
    config: dict  # goes into KernelSource.config: enough to rebuild the schedule
    notes: tuple[str, ...] = field(default_factory=tuple)


def _tuned(spec: GemmSpec, arch: str, where: TunedFrom) -> Named:
    if where.trace is not None:
        text = where.trace.read_text()
        sch = tuning.apply_trace_text(spec, text)
    elif where.work_dir is not None:
        sch = tuning.best_schedule(tuning.open_database(where.work_dir), spec, arch)
        text = tuning.trace_function(sch, spec)
    else:
        raise ConfigError("a tuned schedule needs --trace FILE or --work-dir DIR")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return Named("tuned", sch.mod, {"schedule": "tuned", "trace_sha256": digest})


def named_schedule(spec: GemmSpec, name: str, arch: str = "sm_90", tiles: Tiles | None = None,
                   tuned: TunedFrom = TunedFrom()) -> Named:
    """Schedule `spec`'s workload the way `name` says."""
    if name == "dlight":
        return Named(name, tuning.dlight_module(spec, arch), {"schedule": "dlight"})
    if name == "tuned":
        return _tuned(spec, arch, tuned)
    row = "epilogue_fusion" if name == "manual" else name
    done = ladder.schedule_rung(spec, row, tiles)
    tiles_used = tiles or done.rung.tiles
    config = {"schedule": "ladder", "step": row, "tiles": tiles_used.to_json()}
    return Named(name, done.mod, config, done.notes)


def named_source(spec: GemmSpec, name: str, arch: str = "sm_90", tiles: Tiles | None = None,
                 tuned: TunedFrom = TunedFrom()) -> KernelSource:
    """The KernelSource of schedule `name` (ConfigError when it is not one launchable kernel)."""
    named = named_schedule(spec, name, arch, tiles, tuned)
    return kernel_source(named.mod, spec, named.config, arch)


def known_names() -> tuple[str, ...]:
    return SCHEDULES + tuple(r for r in ladder.RUNG_NAMES if r not in SCHEDULES)
