"""fp8 decode GEMV (issue 70): the problem (`Fp8GemvSpec`) and the block shape (`Fp8GemvConfig`) of the rows
kernel in fp8_rows.py, with the constraints that refuse a pair before anything compiles.

D (M×N, bf16, fp16 or fp32) = scale · (A · Wᵀ) for M ≤ 16: A (M×K) and W (N×K, the weights; torch._scaled_mm's b is
its (K, N) column-major view) both hold e4m3 or e5m2 codes, K contiguous. The scales are float32 on the device,
torch._scaled_mm's: one each ("tensor") or scale_a (M,) and scale_b (N,) ("rowwise"); an optional bias (N,) of
D's type is added after scaling.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

from ...arch import arch_limits
from ...errors import ConfigError, SpecError
from ...spec import FP8_DTYPES, FP8_OUT_DTYPES, GemmSpec
from ..config_base import arch_number, ceil_div

FORMATS = tuple(FP8_DTYPES)
SCALINGS = ("tensor", "rowwise")
OUT_DTYPES = FP8_OUT_DTYPES
MAX_ROWS = 16  # rows of A: two 8-column blocks of the mma's B
PIECE = 16  # fp8 codes in one 16-byte load: K must be a multiple (every row then starts 16-byte aligned)
TILE = 16  # outputs (rows of W) of one mma tile: W is the mma's A operand, 16 rows
CHUNK = 4 * PIECE  # k of one chunk: the 4 lanes of a row group load PIECE neighbouring k each
CONVERTS = ("cvt", "alu")  # fp8 -> f16x2 by the cvt instruction, or by integer ops (fp8_rows.py)
MAX_REGISTERS = 224  # registers() estimate a config may reach (ptxas allows 255 with one block an SM)
STATIC_SMEM = 48 * 1024  # the partial sums are a static __shared__ array
MIN_ARCH = 89  # cvt.rn.f16x2.e4m3x2 / e5m2x2: sm_89 and newer


@dataclass(frozen=True, order=True)
class Fp8GemvSpec:
    m: int
    n: int
    k: int
    fmt: str = "e4m3"  # A's and W's codes (the same format, as gemmtune.torch.scaled_mm takes them)
    scaling: str = "tensor"
    out_dtype: str = "bf16"
    bias: bool = False  # D += bias[n] (N values of D's type) after scaling

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"fp8 GEMV: {name}={value!r} must be an integer >= 1")
        if self.m > MAX_ROWS:
            raise SpecError(f"fp8 GEMV: M={self.m} rows of A; the decode kernel takes at most {MAX_ROWS}")
        if self.k % PIECE:
            raise SpecError(f"fp8 GEMV: K={self.k} must be a multiple of {PIECE} (16-byte rows of fp8 codes)")
        for name, allowed in (("fmt", FORMATS), ("scaling", SCALINGS), ("out_dtype", OUT_DTYPES)):
            if getattr(self, name) not in allowed:
                raise SpecError(f"fp8 GEMV: {name} '{getattr(self, name)}' unsupported; use {', '.join(allowed)}")

    @property
    def vector_blocks(self) -> int:
        """8-column blocks of the mma's B the rows of A fill: 1 for M ≤ 8, else 2."""
        return ceil_div(self.m, 8)

    @property
    def weight_bytes(self) -> int:
        return self.n * self.k

    def as_gemm(self) -> GemmSpec:
        """The GemmSpec that KernelSource carries: the shape and D's type (the entry name says fp8)."""
        return GemmSpec(self.m, self.n, self.k, "nt", self.out_dtype, out_dtype=self.out_dtype)

    def slug(self) -> str:
        bias = "_bias" if self.bias else ""
        return f"gemv_{self.fmt}_{self.scaling}_{self.out_dtype}_{self.m}x{self.n}x{self.k}{bias}"


@dataclass(frozen=True, order=True)
class Fp8GemvConfig:
    """A block is `warps_per_output` warps (WPO) that share `tiles` 16-output tiles of W and split K: each step
    of the loop, warp p of the block takes the p-th span of `unroll` chunks (64 k each) and loads all of them
    before it multiplies. `w_convert` / `a_convert`: how W's and A's codes become f16 (CONVERTS)."""

    warps_per_output: int = 8
    tiles: int = 1
    unroll: int = 4
    w_convert: str = "cvt"
    a_convert: str = "cvt"

    @property
    def threads(self) -> int:
        return 32 * self.warps_per_output

    @property
    def block_outputs(self) -> int:
        return TILE * self.tiles

    @property
    def span(self) -> int:
        """k one warp covers per step."""
        return self.unroll * CHUNK

    def to_json(self) -> dict:
        return asdict(self)

    def key(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    def describe(self) -> str:
        return (f"{self.threads} threads ({self.warps_per_output} warps split K), {self.tiles} tile(s) of 16 outputs, "
                f"unroll {self.unroll}, W {self.w_convert}, A {self.a_convert}")

    def with_(self, **changes) -> "Fp8GemvConfig":
        return replace(self, **changes)


def rejections(config: Fp8GemvConfig, spec: Fp8GemvSpec, arch: str) -> dict[str, str]:
    """{constraint: reason} for every constraint the pair breaks; empty when it is valid."""
    broken: dict[str, str] = {}
    if arch_number(arch) < MIN_ARCH:
        broken["arch"] = f"fp8 conversions (cvt .e4m3x2 / .e5m2x2) need sm_89+, not {arch}"
    if config.warps_per_output not in (1, 2, 4, 8, 16, 32):
        broken["warps_per_output"] = f"warps_per_output={config.warps_per_output}: a power of two, 1-32"
    if config.tiles not in (1, 2, 4):
        broken["tiles"] = f"tiles={config.tiles}: 1, 2 or 4 16-output tiles a block"
    if config.unroll not in (1, 2, 4, 8):
        broken["unroll"] = f"unroll={config.unroll}: 1, 2, 4 or 8 chunks a step"
    if registers(config, spec) > MAX_REGISTERS:
        broken["registers"] = (f"unroll {config.unroll} x ({2 * config.tiles} rows of W + {spec.vector_blocks} of A) "
                               f"16-byte loads in flight: about {registers(config, spec)} registers a thread, over "
                               f"{MAX_REGISTERS}")
    partial_bytes = config.warps_per_output * config.tiles * spec.vector_blocks * 4 * 32 * 4
    if config.warps_per_output > 1 and partial_bytes > STATIC_SMEM:
        broken["partial_sums"] = (f"the warps' partial sums take {partial_bytes} B of shared memory; at most "
                                  f"{STATIC_SMEM} (fewer warps or tiles)")
    for name in ("w_convert", "a_convert"):
        if getattr(config, name) not in CONVERTS:
            broken[name] = f"{name}='{getattr(config, name)}': one of {', '.join(CONVERTS)}"
    return broken


def registers(config: Fp8GemvConfig, spec: Fp8GemvSpec) -> int:
    """About how many registers a thread holds: a step's 16-byte loads (4 each), the sums, and ~32 for addresses
    and conversions (NVRTC 13.0, sm_90: 94 measured for an estimate of 104, tiles 1, unroll 4, 16 rows)."""
    loads = config.unroll * (2 * config.tiles + spec.vector_blocks)
    return 4 * loads + 4 * config.tiles * spec.vector_blocks + 32


def min_blocks(config: Fp8GemvConfig, spec: Fp8GemvSpec) -> int:
    """Blocks an SM must hold at once (__launch_bounds__): 512 threads' worth where a thread fits 128 registers,
    so that ptxas keeps it there and an SM keeps enough warps; else 1 (up to 255 registers, no spills)."""
    if registers(config, spec) > 128:
        return 1
    return max(1, 512 // config.threads)


def check(config: Fp8GemvConfig, spec: Fp8GemvSpec, arch: str) -> None:
    broken = rejections(config, spec, arch)
    if broken:
        raise ConfigError(f"fp8 GEMV config rejected for {spec.slug()} on {arch}: " + "; ".join(broken.values()))


# How many warps an SM should hold to keep HBM busy: 16 warps of 128-256 bytes in flight a lane each.
WARPS_PER_SM = 16


def default_config(spec: Fp8GemvSpec, sm_count: int | None = None) -> Fp8GemvConfig:
    """One 16-output tile a block, unroll 4 (256 k a warp's step); 8 warps splitting K, more (up to 32) where the
    tiles alone leave SMs without WARPS_PER_SM warps, fewer where K has fewer spans than warps. e5m2 converts with
    one byte permute (its codes are the top byte of an f16); e4m3 with the cvt instruction."""
    sm_count = sm_count or arch_limits("sm_90").sm_count  # an H100 / H200 where the GPU is not known
    convert = "alu" if spec.fmt == "e5m2" else "cvt"
    config = Fp8GemvConfig(w_convert=convert, a_convert=convert)
    wanted = ceil_div(sm_count * WARPS_PER_SM, ceil_div(spec.n, TILE))
    spans = ceil_div(spec.k, config.span)
    wpo = 8
    while wpo < 32 and wpo < wanted and 2 * wpo <= spans:
        wpo *= 2
    while wpo > 1 and wpo > spans:
        wpo //= 2
    return config.with_(warps_per_output=wpo)


def grid_blocks(spec: Fp8GemvSpec, config: Fp8GemvConfig) -> int:
    return ceil_div(spec.n, config.block_outputs)
