"""Which config to export, and why: tuning database, else shipped known configs, else the default.

1. ``tuning-db``: the best measured config for this spec on this device (``gemmtune.tune.db``).
2. ``known-configs``: ``gemmtune/data/known_configs.json``, good configs per GPU for common shapes,
   matched by GPU name (or, without a GPU, by target arch); the nearest shape with the same layout.
3. ``default``: ``simt_config.default_config`` — sound for every shape.
Every answer carries a :class:`Provenance` saying which step produced it.
"""
from __future__ import annotations

import importlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..kernels.simt_config import FAMILY, SimtConfig, arch_number, default_config, rejections
from ..spec import GemmSpec
from .manifest import Provenance

KNOWN_CONFIGS = Path(__file__).resolve().parent.parent / "data" / "known_configs.json"


@dataclass(frozen=True)
class ConfigChoice:
    config: SimtConfig
    provenance: Provenance

    def describe(self) -> str:
        return f"config source: {self.provenance.describe()}"


@dataclass(frozen=True)
class KnownConfig:
    """One row of known_configs.json."""

    gpu: str
    arch: str
    m: int
    n: int
    k: int
    layout: str
    config: SimtConfig
    measured_s: float | None
    cublas_s: float | None
    provenance: str
    epilogue: str = "none"  # the epilogue the config was tuned with

    @staticmethod
    def from_json(data: dict) -> "KnownConfig":
        return KnownConfig(data["gpu"], data["arch"], data["m"], data["n"], data["k"], data.get("layout", "nn"),
                           SimtConfig.from_json(data["config"]), data.get("measured_s"), data.get("cublas_s"),
                           data.get("provenance", ""), data.get("epilogue", "none"))

    def distance(self, spec: GemmSpec) -> tuple[bool, float, bool]:
        """Sort key: same layout first, then the smallest log-ratio of the sizes, then the same epilogue."""
        sizes = abs(math.log(spec.m / self.m)) + abs(math.log(spec.n / self.n)) + abs(math.log(spec.k / self.k))
        return (self.layout != spec.layout, sizes, self.epilogue != str(spec.epilogue))


def given_config(config: SimtConfig, detail: str = "given by the caller") -> ConfigChoice:
    return ConfigChoice(config, Provenance("given", detail))


def choose_config(spec: GemmSpec, arch: str, device: Any = None, db_path: Path | None = None,
                  table: Path = KNOWN_CONFIGS) -> ConfigChoice:
    """The config to export for `spec` on `arch` (device: a gemmtune.device.DeviceInfo or None)."""
    found = from_tuning_db(spec, arch, device, db_path) or from_known_configs(spec, arch, device, table)
    if found is not None:
        return found
    detail = "no tuned or known config for this spec and device; simt_config.default_config"
    return ConfigChoice(default_config(spec, arch), Provenance("default", detail))


def from_tuning_db(spec: GemmSpec, arch: str, device: Any, db_path: Path | None) -> ConfigChoice | None:
    """The tuner's best config for this spec on this device, or None (no database module or entry)."""
    try:
        db = importlib.import_module("gemmtune.tune.db")
    except ModuleNotFoundError as exc:
        if exc.name not in ("gemmtune.tune", "gemmtune.tune.db"):
            raise
        return None
    found = db.best_known_trial(spec, device if device is not None else arch, db_path=db_path)
    if found is None:
        return None
    config = found.result.config
    if not isinstance(config, SimtConfig):
        raise ConfigError(f"the tuning database returned a {type(config).__name__}, not a {FAMILY} config")
    where = device.name if device is not None else arch
    detail = f"best tuned config for {spec.short()} on {where}"
    return ConfigChoice(config, Provenance("tuning-db", detail, found.result.median_s))


def load_known_configs(table: Path = KNOWN_CONFIGS) -> list[KnownConfig]:
    data = json.loads(Path(table).read_text())
    if data.get("family") != FAMILY:
        raise ConfigError(f"{table} holds {data.get('family')!r} configs, not {FAMILY!r}")
    return [KnownConfig.from_json(row) for row in data["entries"]]


def _matches(row: KnownConfig, arch: str, device: Any) -> bool:
    if arch_number(row.arch) != arch_number(arch):
        return False
    return device is None or row.gpu.lower() in device.name.lower()


def from_known_configs(spec: GemmSpec, arch: str, device: Any = None,
                       table: Path = KNOWN_CONFIGS) -> ConfigChoice | None:
    """The nearest shipped config for this GPU (or arch) that is valid for `spec`, or None."""
    rows = sorted((r for r in load_known_configs(table) if _matches(r, arch, device)), key=lambda r: r.distance(spec))
    for row in rows:
        if not rejections(row.config, spec, arch):
            fused = f" {row.epilogue}" if row.epilogue != "none" else ""
            detail = (f"{row.gpu} entry for {row.m}x{row.n}x{row.k} {row.layout}{fused} in {Path(table).name}"
                      + (f"; {row.provenance}" if row.provenance else ""))
            return ConfigChoice(row.config, Provenance("known-configs", detail, row.measured_s, row.cublas_s))
    return None
