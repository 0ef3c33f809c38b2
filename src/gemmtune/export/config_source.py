"""Which config to export, and why: tuning database, else shipped known configs, else the default.

First the family: the one asked for, else the registry's choice for the spec and arch
(``kernels.family_for``). Then, within that family:
1. ``tuning-db``: the best measured config for this spec on this device (``gemmtune.tune.db``).
2. ``known-configs``: ``gemmtune/data/known_configs.json``, good configs per GPU for common shapes,
   matched by family and GPU name (or, without a GPU, by target arch); the nearest shape with the
   same layout (and dtype) wins, if it is near (sizes within NEAR_SHAPE in summed log ratio): a
   config tuned for 4096³ is no answer for 64×4096×4096.
3. ``chooser``: the config chooser's pick among the family's candidates (``gemmtune.chooser``: a
   model of wave quantization, tile waste, occupancy and traffic, trained on measured rows).
4. ``default``: the family's ``default_config`` — sound for every shape it supports.
Every answer carries a :class:`Provenance` saying which step produced it.
"""
from __future__ import annotations

import importlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..arch import device_of_arch, geometry, known_arch
from ..errors import ConfigError
from ..kernels import Family, families, family_for, family_of_config, get_family
from ..kernels.config_base import arch_number
from ..spec import GemmSpec
from .manifest import Provenance

KNOWN_CONFIGS = Path(__file__).resolve().parent.parent / "data" / "known_configs.json"


NEAR_SHAPE = 0.25  # summed |log(size ratio)| of M, N, K within which a known config still applies
DEFAULT_TABLE_FAMILY = "simt"  # entries written before families were plug-ins carry no family


@dataclass(frozen=True)
class ConfigChoice:
    config: Any  # a Config of `family`
    provenance: Provenance
    family: str

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
    config: Any  # a Config of `family`
    measured_s: float | None
    cublas_s: float | None
    provenance: str
    epilogue: str = "none"  # the epilogue the config was tuned with
    family: str = DEFAULT_TABLE_FAMILY
    dtype: str = "fp32"  # the dtype the config was tuned with

    @staticmethod
    def from_json(data: dict) -> "KnownConfig":
        family = get_family(data.get("family", DEFAULT_TABLE_FAMILY))
        return KnownConfig(data["gpu"], data["arch"], data["m"], data["n"], data["k"], data.get("layout", "nn"),
                           family.config_from_json(data["config"]), data.get("measured_s"), data.get("cublas_s"),
                           data.get("provenance", ""), data.get("epilogue", "none"), family.name,
                           data.get("dtype", "fp32"))

    def distance(self, spec: GemmSpec) -> tuple[bool, bool, float, bool]:
        """Sort key: same layout first, then the same dtype, then the smallest log-ratio of the sizes,
        then the same epilogue."""
        sizes = abs(math.log(spec.m / self.m)) + abs(math.log(spec.n / self.n)) + abs(math.log(spec.k / self.k))
        return (self.layout != spec.layout, self.dtype != spec.dtype, sizes, self.epilogue != str(spec.epilogue))


def given_config(config: Any, detail: str = "given by the caller") -> ConfigChoice:
    """A config the caller picked; its family is the one whose Config type it is."""
    return ConfigChoice(config, Provenance("given", detail), family_of_config(config).name)


def choose_config(spec: GemmSpec, arch: str, device: Any = None, db_path: Path | None = None,
                  table: Path = KNOWN_CONFIGS, family: str | None = None) -> ConfigChoice:
    """The config to export for `spec` on `arch` (device: a gemmtune.device.DeviceInfo or None), from
    `family` (default: the registry's choice for the spec and arch; ConfigError when it cannot)."""
    chosen = family_for(spec, arch, family)
    device = device_of_arch(device, arch)  # building for another GPU: its arch's table, not this GPU's records
    found = (from_tuning_db(spec, arch, device, db_path, chosen)
             or from_known_configs(spec, arch, device, table, chosen.name, NEAR_SHAPE)
             or from_chooser(spec, arch, device, chosen))
    if found is not None:
        return found
    detail = f"no tuned or known config for this spec and device; {chosen.name} default_config"
    return ConfigChoice(chosen.default_config(spec, arch), Provenance("default", detail), chosen.name)


def from_tuning_db(spec: GemmSpec, arch: str, device: Any, db_path: Path | None,
                   family: Family) -> ConfigChoice | None:
    """The tuner's best config for this spec on this device, or None (no database module or entry)."""
    try:
        db = importlib.import_module("gemmtune.tune.db")
    except ModuleNotFoundError as exc:
        if exc.name not in ("gemmtune.tune", "gemmtune.tune.db"):
            raise
        return None
    found = db.best_known_trial(spec, device if device is not None else arch, db_path=db_path, family=family.name)
    if found is None:
        return None
    config = found.result.config
    if not isinstance(config, family.config_type):
        raise ConfigError(f"the tuning database returned a {type(config).__name__}, not a {family.name} config")
    where = device.name if device is not None else arch
    detail = f"best tuned config for {spec.short()} on {where}"
    return ConfigChoice(config, Provenance("tuning-db", detail, found.result.median_s), family.name)


def load_known_configs(table: Path = KNOWN_CONFIGS) -> list[KnownConfig]:
    """Every entry of the table, each parsed by its family's Config (entries without one are simt)."""
    data = json.loads(Path(table).read_text())
    return [KnownConfig.from_json(row) for row in data["entries"]]


def _matches(row: KnownConfig, arch: str, device: Any, family: str) -> bool:
    if row.family != family or arch_number(row.arch) != arch_number(arch):
        return False
    return device is None or row.gpu.lower() in device.name.lower()


def from_known_configs(spec: GemmSpec, arch: str, device: Any = None, table: Path = KNOWN_CONFIGS,
                       family: str = DEFAULT_TABLE_FAMILY, max_distance: float = math.inf) -> ConfigChoice | None:
    """The nearest shipped `family` config for this GPU (or arch) that is valid for `spec` and whose
    shape (same layout and dtype) lies within `max_distance`, or None. None for a gated spec: the table holds
    plain GEMMs (a gated spec's tile is the chooser's, as build and tune-many's untuned pick both take it)."""
    if spec.gated:
        return None
    registered = {f.name: f for f in families()}
    same_class = (registered[family].shape_class if family in registered else None) or (lambda s: None)
    rows = sorted((r for r in load_known_configs(table) if _matches(r, arch, device, family)
                   and same_class(GemmSpec(r.m, r.n, r.k, r.layout, r.dtype)) == same_class(spec)
                   and (max_distance == math.inf or (r.distance(spec)[:2] == (False, False)
                                                     and r.distance(spec)[2] <= max_distance))),
                  key=lambda r: r.distance(spec))
    if not rows:
        return None
    rejections = get_family(family).rejections
    for row in rows:
        if not rejections(row.config, spec, arch):
            fused = f" {row.epilogue}" if row.epilogue != "none" else ""
            dtype = f" {row.dtype}" if row.dtype != "fp32" else ""
            detail = (f"{row.gpu} entry for {row.m}x{row.n}x{row.k} {row.layout}{dtype}{fused} in {Path(table).name}"
                      + (f"; {row.provenance}" if row.provenance else ""))
            provenance = Provenance("known-configs", detail, row.measured_s, row.cublas_s, gpu=row.gpu)
            return ConfigChoice(row.config, provenance, family)
    return None


def from_chooser(spec: GemmSpec, arch: str, device: Any, family: Family) -> ConfigChoice | None:
    """The chooser's pick among the family's candidates (None when it has none for the spec)."""
    from ..chooser import rank

    if not known_arch(arch):
        return None  # no GPU geometry to rank for (the compiler names an arch it does not know)
    sm_count = geometry(device, arch).sm_count  # no GPU (or a stand-in): the arch table's GPU
    picks = rank(spec, arch, sm_count, family.name)
    if not picks:
        return None
    return ConfigChoice(picks[0].config, Provenance("chooser", picks[0].why()), family.name)
