"""An fp8 GemmSpec as the grouped fp8 kernel with one group (issue 70): the family fp8 GEMMs build through.

A GemmSpec with dtype e4m3 / e5m2 and a scaling (tensor, rowwise, block) is the GroupedSpec of one group of M
rows (`grouped_spec`); its KernelSource is the grouped kernel's, carrying the GemmSpec, so show, verify, time
and bench treat it as any other kernel. The kernel reads its row count on the device (`offs`, one int32: M) and
the scales (`scale_a`, `scale_b`, fp32, laid out as gemmtune.fp8.gemm_inputs says) beside A, B and D.

The registry asks this family for fp8 specs on sm_90a (kernels.kind_families; other archs get the mma family's fp8).
Tuning and export go through the grouped tuner and exporter as one group (tune/grouped_fp8.py,
export/grouped_fp8.py). What it lacks: fp32 D.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from ..arch import geometry
from ..errors import ConfigError, SpecError
from ..kernel_source import KernelSource
from ..kernels import Family
from ..kernels.config_base import arch_number
from ..spec import GemmSpec, stable_hash
from .config import GroupedConfig, default_config as grouped_default, rejections as grouped_rejections
from .render import VERSION as GROUPED_VERSION, render as render_grouped
from .spec import GroupedSpec

NAME = "fp8_grouped"
VERSION = f"{GROUPED_VERSION}.1"  # the grouped kernel's version, then this adapter's


@dataclass(frozen=True, order=True)
class Fp8GemmConfig(GroupedConfig):
    """The grouped kernel's config, with what the registry asks of a family's Config (from_json, key, describe)."""

    @classmethod
    def of(cls, config: GroupedConfig) -> "Fp8GemmConfig":
        return cls(**asdict(config))

    @classmethod
    def from_json(cls, data: dict) -> "Fp8GemmConfig":
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown {NAME} config keys: {sorted(unknown)}")
        return cls(**data)

    def key(self) -> str:
        return stable_hash(self.to_json())

    def describe(self) -> str:
        roles = f"producer+{self.consumers}wg" + (" pingpong" if self.pingpong else "")
        store = " staged-store" if self.staged_store else ""
        band = f" band{self.band_m}" if self.band_m else ""
        cluster = f" cluster{self.cluster}" if self.cluster > 1 else ""
        promote = f" promoted/{self.promote_every}" if self.promote_every else ""
        overlap = " overlap-static" if self.overlap_static else " overlap" if self.promote_overlap else ""
        return f"{self.bm}x{self.bn} s{self.stages} {roles}{store}{band}{cluster}{promote}{overlap}"


def grouped_spec(spec: GemmSpec) -> GroupedSpec:
    """The one-group GroupedSpec of an fp8 `spec` (SpecError where the grouped kernel cannot take it)."""
    if not spec.fp8:
        raise SpecError(f"{spec.short()}: the {NAME} family runs fp8 inputs (e4m3, e5m2) only")
    return GroupedSpec(1, spec.m, spec.n, spec.k, spec.dtype, spec.epilogue, out_dtype=spec.out_dtype,
                       scaling=spec.scaling)


def supports(spec: GemmSpec, arch: str) -> str | None:
    """Why the grouped fp8 kernel cannot run `spec` on `arch`, or None."""
    if not spec.fp8:
        return f"{NAME} runs fp8 inputs (e4m3, e5m2) only, not {spec.dtype}"
    if arch_number(arch) != 90:
        return f"fp8 wgmma and TMA need a Hopper GPU (sm_90a), not {arch}"
    try:
        grouped_spec(spec)
    except SpecError as err:
        return str(err)
    return None


def default_config(spec: GemmSpec, arch: str) -> Fp8GemmConfig:
    return Fp8GemmConfig.of(grouped_default(grouped_spec(spec)))


def rejections(config: GroupedConfig, spec: GemmSpec, arch: str) -> dict[str, str]:
    return grouped_rejections(config, grouped_spec(spec))


def ladder(arch: str) -> list[tuple[str, Fp8GemmConfig]]:
    """Named configs valid for every fp8 spec (block scales take 128-column tiles of 64 rows a consumer)."""
    return [("one_consumer", Fp8GemmConfig(bm=64, bn=128, consumers=1)),
            ("two_consumers", Fp8GemmConfig(bm=128, bn=128, consumers=2))]


def render(spec: GemmSpec, config: GroupedConfig, arch: str) -> KernelSource:
    """The grouped kernel for one group of M rows on the arch table's SM count, carrying `spec`."""
    source = render_grouped(grouped_spec(spec), config, geometry(None, arch).sm_count)
    return replace(source, spec=spec, family=NAME, family_version=VERSION)


def _space():
    raise ConfigError(f"{NAME} has no combinatorial search space: 'gemmtune tune' times the grouped kernel's "
                      "candidate list, which 'gemmtune space' prints")


FAMILY = Family(name=NAME, version=VERSION, config_type=Fp8GemmConfig, supports=supports, render=render,
                ladder=ladder, default_config=default_config, rejections=rejections, space=_space,
                description="fp8 GEMM (e4m3/e5m2, tensor/rowwise/block scales) as the grouped wgmma kernel, one group")
