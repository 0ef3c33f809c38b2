"""The mma.sync tensor-core family's Config, its constraints with reasons, and its ladder.

One frozen dataclass spans the ladder: mma.sync fed by plain shared-memory loads, then ldmatrix,
a multistage cp.async ring, an XOR-swizzled shared layout, larger warp tiles, and the tuned
default. Every step runs every supported spec (any M, N, K, layout, alignment), so the steps differ
only in speed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...arch import arch_limits, geometry, known_arch
from ...spec import GemmSpec
from ..config_base import FamilyConfig, arch_number, rejections_by, valid_named

NAME = "mma"
VERSION = "1"
DTYPES = ("bf16", "fp16", "tf32")
FP8_DTYPES = ("e4m3", "e5m2")  # sm_89+: mma.sync m16n8k32, K-major A and B (layout nt), scales applied in fp32
INPUT_BYTES = {"bf16": 2, "fp16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1}
KSTEP_BYTES = 32  # one mma's depth in bytes of A/B: k16 of 16-bit values, k8 of tf32, k32 of fp8
FP8_MIN_ARCH = 89  # mma.sync with .e4m3 / .e5m2 operands: sm_89 (Ada) and newer (PTX ISA 8.4)
# Where ptxas turns that mma into one tensor-core instruction (QMMA.16832); elsewhere (sm_90, sm_100) it
# unpacks each fragment to f16 (F2FP) and runs two HMMA.16816: valid, at 16-bit speed, and registers tighter.
FP8_NATIVE_ARCHES = (89, 120, 121)
FP8_BLOCK = 128  # block scaling's group length along K (gemmtune.fp8.BLOCK)
MAX_ACCUMULATORS = 128  # fp32 accumulators per thread (a 64x64 warp tile); more spills
MAX_THREADS = 512


@dataclass(frozen=True, order=True)
class MmaConfig(FamilyConfig):
    """Parameters of one mma.sync kernel.

    bm×bn: the block's output tile. k_bytes: depth of one k-slice in bytes of A/B, so a step means
      the same shared memory for every dtype (bk(dtype): 64 B = 32 bf16/fp16 values or 16 tf32).
    wm×wn: one warp's output tile (multiples of 16); the block has (bm/wm)·(bn/wn) warps.
    stages: shared-memory buffers of the k-slice ring (1 = load, wait, compute, repeat).
    ldmatrix: fragments come from shared memory through ldmatrix (.trans for MN-major 16-bit
      operands); otherwise (and for MN-major tf32, which ldmatrix cannot transpose) plain loads.
    async_copy: global -> shared through cp.async (sm_80+) where the copy is 4 bytes or more;
      2-byte element copies (rows with an odd length) always go through registers.
    swizzle: 16-byte chunks of each shared row XORed with the row, so ldmatrix's eight row reads
      of a phase fall in distinct banks; without it rows are stored plainly (bank conflicts).
    group_m: rasterization: consecutive blocks walk down group_m rows of tiles before moving right
      (they share A and B panels in L2).
    blocks_per_sm: the blocks one SM should hold at once: __launch_bounds__' minimum, so ptxas keeps
      registers within 65536 / (threads · blocks); shared memory must fit that many blocks too.
    transpose_copy: tf32 only: every MN-major operand is read from global memory through registers
      (vector loads along M or N) and stored K-major in shared memory, so its fragments come by the
      K-major ldmatrix path instead of plain 32-bit loads (ldmatrix cannot transpose 32-bit values).
      Not measured on a GPU yet; off by default, and left out of to_json when off (old keys stay).
    """

    bm: int = 128
    bn: int = 256
    k_bytes: int = 64
    wm: int = 64
    wn: int = 64
    stages: int = 4
    ldmatrix: bool = True
    async_copy: bool = True
    swizzle: bool = True
    group_m: int = 8
    blocks_per_sm: int = 1
    transpose_copy: bool = False
    FAMILY_LABEL = "mma"

    def to_json(self) -> dict:
        data = super().to_json()
        if not data["transpose_copy"]:  # configs (and database keys) from before the option stay unchanged
            del data["transpose_copy"]
        return data

    # --- derived shape --------------------------------------------------------------------
    def bk(self, dtype: str) -> int:
        return self.k_bytes // INPUT_BYTES[dtype]

    @property
    def warps(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn) if self.wm and self.wn else 0

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def accumulators(self) -> int:
        return self.wm * self.wn // 32

    def stage_bytes(self) -> int:
        return (self.bm + self.bn) * self.k_bytes

    def smem_bytes(self) -> int:
        return self.stages * self.stage_bytes()

    def describe(self) -> str:
        feed = "ldmatrix" if self.ldmatrix else "lds"
        copy = " cp.async" if self.async_copy else ""
        return (f"tile {self.bm}x{self.bn}x{self.k_bytes}B warp {self.wm}x{self.wn} stages{self.stages} "
                f"{feed}{copy}" + (" swizzle" if self.swizzle else "") + f" g{self.group_m}"
                + (f" {self.blocks_per_sm}/SM" if self.blocks_per_sm > 1 else "")
                + (" transpose" if self.transpose_copy else ""))


# --- what the family can run at all ----------------------------------------------------------------
def tensor_dtype(spec: GemmSpec) -> str:
    """The type the tensor cores read: tf32 for fp32 specs (3xtf32 splits each value into two tf32)."""
    return "tf32" if spec.dtype == "fp32" else spec.dtype


def splits_fp32(spec: GemmSpec) -> bool:
    """Whether the kernel multiplies fp32 inputs as 3xtf32 (three tf32 products of split operands)."""
    return spec.dtype == "fp32"


def supports(spec: GemmSpec, arch: str) -> str | None:
    """Why mma.sync cannot run `spec` on `arch`, or None (any shape, layout and alignment otherwise)."""
    number = arch_number(arch)
    if spec.dtype == "fp32":
        return _fp32_problem(spec, arch)
    if spec.fp8:
        return _fp8_problem(spec, arch)
    if spec.dtype not in DTYPES:
        return f"tensor-core inputs must be {', '.join(DTYPES)}, not {spec.dtype}"
    if number < 75:
        return f"mma.sync with ldmatrix needs sm_75 or newer, not {arch}"
    if number < 80 and spec.dtype != "fp16":
        return f"{spec.dtype} mma.sync needs sm_80 or newer; {arch} tensor cores take fp16 only"
    return None


def _fp32_problem(spec: GemmSpec, arch: str) -> str | None:
    """fp32 runs here as 3xtf32: asked for, or what auto picks for the shape (gemmtune.precision)."""
    from ...precision import math_refusal

    if arch_number(arch) < 80:
        return f"3xtf32 needs tf32 tensor cores (sm_80 or newer), not {arch}"
    return math_refusal(spec, arch, NAME)


def _fp8_problem(spec: GemmSpec, arch: str) -> str | None:
    """fp8 (issue 70): m16n8k32 e4m3/e5m2 mma.sync exists from sm_89; K-major rows (layout nt, the spec's
    only fp8 layout) are copied by cp.async, 4 bytes at least, so K must be a multiple of 4."""
    if arch_number(arch) < FP8_MIN_ARCH:
        return f"fp8 mma.sync (m16n8k32 {spec.dtype}) needs sm_89 or newer, not {arch}"
    if spec.k % 4:
        return f"fp8 rows of K={spec.k} bytes: the mma family copies them 4 bytes at least, so K must be a multiple of 4"
    return None


def fp8_emulated(arch: str) -> bool:
    """Whether ptxas emulates fp8 mma.sync on `arch` (f16 unpacks and two m16n8k16; sm_90, sm_100)."""
    return arch_number(arch) not in FP8_NATIVE_ARCHES


def yields(spec: GemmSpec, arch: str) -> str | None:
    """fp8 on sm_90 is the grouped wgmma kernel's (fp8_grouped, asked first); where it refuses a spec the
    registry does not fall back to mma.sync's emulated fp8 there. Asked by name, mma still runs it."""
    if spec.fp8 and arch_number(arch) == 90:
        return "fp8 on sm_90 runs on the grouped wgmma kernel (mma.sync's fp8 is emulated there; --family mma runs it)"
    return None


def block_scaled(spec: GemmSpec) -> bool:
    """Whether the kernel scales each 128-long k-block's sums as it goes (fp8 block scaling: two-level
    accumulation, a second set of sums a thread)."""
    return spec.fp8 and spec.scaling == "block"


def smem_limit(arch: str) -> int:
    """Dynamic shared memory one block may opt in to on `arch` (48 KiB for an arch the table lacks)."""
    return geometry(None, arch).smem_per_block if known_arch(arch) else 48 * 1024


# --- constraints --------------------------------------------------------------------------------
Constraint = Callable[[MmaConfig, GemmSpec, str], "str | None"]


def _dtype(c: MmaConfig, s: GemmSpec, arch: str) -> str | None:
    return supports(s, arch)


def _tile(c: MmaConfig, s: GemmSpec, arch: str) -> str | None:
    if c.bm not in (16, 32, 64, 128, 256) or c.bn not in (16, 32, 64, 128, 256):
        return f"tile {c.bm}x{c.bn}: bm and bn must be 16, 32, 64, 128 or 256"
    if c.wm not in (16, 32, 64, 128) or c.wn not in (16, 32, 64, 128):
        return f"warp tile {c.wm}x{c.wn}: wm and wn must be 16, 32, 64 or 128 (ldmatrix x4 covers 16)"
    if c.bm % c.wm or c.bn % c.wn:
        return f"warp tile {c.wm}x{c.wn} does not divide block tile {c.bm}x{c.bn}"
    if not 32 <= c.threads <= MAX_THREADS:
        return f"{c.warps} warps per block: 1 to {MAX_THREADS // 32}"
    return None


def _depth(c: MmaConfig, s: GemmSpec, arch: str) -> str | None:
    if c.k_bytes not in (32, 64, 128):
        return f"k_bytes={c.k_bytes}: 32, 64 or 128 bytes of K per k-slice"
    return None


def _registers(c: MmaConfig, s: GemmSpec, arch: str) -> str | None:
    if c.accumulators > MAX_ACCUMULATORS:
        return f"{c.accumulators} fp32 accumulators per thread exceed {MAX_ACCUMULATORS} (registers would spill)"
    return None


def _pipeline(c: MmaConfig, s: GemmSpec, arch: str) -> str | None:
    if not 1 <= c.stages <= 5:
        return f"stages={c.stages}: 1 to 5 shared-memory buffers"
    if c.async_copy and arch_number(arch) < 80:
        return f"cp.async needs sm_80 or newer, not {arch}"
    if c.group_m not in (1, 2, 4, 8, 16):
        return f"group_m={c.group_m}: 1, 2, 4, 8 or 16"
    return None


def _smem(c: MmaConfig, s: GemmSpec, arch: str) -> str | None:
    need, limit = c.smem_bytes(), smem_limit(arch)
    if need > limit:
        return f"{c.stages} stages of {c.bm}x{c.bn}x{c.k_bytes}B slices need {need} B of shared memory, over {limit} B"
    return None


def _occupancy(c: MmaConfig, s: GemmSpec, arch: str) -> str | None:
    if c.blocks_per_sm not in (1, 2):
        return f"blocks_per_sm={c.blocks_per_sm}: 1 or 2"
    cap = min(255, 65536 // (c.threads * c.blocks_per_sm))
    # the accumulators, two fragment sets and ~40 registers of addresses and indices (3xtf32: the
    # split fragments' small parts and the partial sums ptxas keeps in flight beside the accumulators)
    fragments = c.wm // 16 * 4 + c.wn // 8 * 2
    need = (c.accumulators + 2 * fragments + 40) if not splits_fp32(s) else (2 * c.accumulators + 3 * fragments + 40)
    if block_scaled(s):  # the k-block's raw sums beside the scaled total, and the k-block's row scales
        need = 2 * c.accumulators + 2 * fragments + 40 + c.wm // 8
    if need > cap:  # ptxas would spill to fit the launch bound (e.g. 16 warps of 64x64: 128 registers each)
        return f"{c.blocks_per_sm} block(s) of {c.threads} threads leave {cap} registers a thread, under ~{need}"
    if c.blocks_per_sm == 1:
        return None
    if known_arch(arch):
        limits = arch_limits(arch)
        per_block = c.smem_bytes() + 1024  # the driver reserves 1 KiB of each block's shared memory
        if per_block * c.blocks_per_sm > limits.smem_per_sm:
            return f"{c.blocks_per_sm} blocks need {per_block * c.blocks_per_sm} B of shared memory, over the SM's {limits.smem_per_sm} B"
        if c.threads * c.blocks_per_sm > limits.threads_per_sm:
            return f"{c.blocks_per_sm} blocks of {c.threads} threads exceed the SM's {limits.threads_per_sm}"
    return None


def _transpose(c: MmaConfig, s: GemmSpec, arch: str) -> str | None:
    if not c.transpose_copy:
        return None
    if splits_fp32(s):  # two ldmatrix fragment sets beside 3xtf32's split values: ptxas spills on sm_90
        return "transpose_copy is for tf32; fp32 as 3xtf32 keeps its plain loads (with it ptxas spills)"
    if s.dtype != "tf32":
        return (f"transpose_copy transposes MN-major tf32 tiles; {s.dtype} MN-major tiles are read by "
                "ldmatrix.trans as stored")
    if not s.a_trans and s.b_trans:
        return f"transpose_copy: layout {s.layout} has no MN-major operand (A and B are K-major)"
    return None


def _fp8(c: MmaConfig, s: GemmSpec, arch: str) -> str | None:
    if not s.fp8:
        return None
    emulated_limit = MAX_ACCUMULATORS // (4 if block_scaled(s) else 2)  # NVRTC 13.0 spilled 40-200 B past it
    if fp8_emulated(arch) and c.accumulators > emulated_limit:
        return (f"{arch} runs fp8 mma.sync as f16 unpacks and two m16n8k16, whose registers leave room for "
                f"{emulated_limit} sums a thread{' (twice: block scales)' if block_scaled(s) else ''}, not {c.accumulators}")
    if s.epilogue.reads_c and c.accumulators > MAX_ACCUMULATORS // 2:  # NVRTC 13.0, sm_89 / sm_120: 8-32 B
        return (f"fp8 with an epilogue that reads C: the scales and C's pairs beside {c.accumulators} sums a "
                "thread spill; warp tiles up to 64x32")
    if block_scaled(s) and 2 * c.accumulators > MAX_ACCUMULATORS:
        return (f"fp8 block scales keep each k-block's raw sums beside the scaled total: 2x{c.accumulators} fp32 "
                f"sums a thread exceed {MAX_ACCUMULATORS} (registers would spill); warp tiles up to 64x32")
    return None


CONSTRAINTS: dict[str, Constraint] = {
    "dtype": _dtype, "tile": _tile, "depth": _depth, "registers": _registers, "pipeline": _pipeline,
    "shared_memory": _smem, "occupancy": _occupancy, "transpose_copy": _transpose, "fp8": _fp8,
}


def rejections(config: MmaConfig, spec: GemmSpec, arch: str = "sm_80") -> dict[str, str]:
    """{constraint name: reason} for every constraint the config breaks; empty when valid."""
    return rejections_by(CONSTRAINTS, config, spec, arch)


def _fitting_stages(config: MmaConfig, arch: str, wanted: int) -> int:
    """The most stages up to `wanted` whose ring fits the arch's shared memory (at least 1)."""
    fits = max(1, smem_limit(arch) // config.stage_bytes())
    return max(1, min(wanted, fits))


def ladder(arch: str = "sm_80") -> list[tuple[str, MmaConfig]]:
    """The mma.sync ladder: each step adds one technique to the one before."""
    has_cp_async = arch_number(arch) >= 80
    plain = MmaConfig(bm=64, bn=64, k_bytes=64, wm=32, wn=32, stages=1, ldmatrix=False, async_copy=False,
                      swizzle=False, group_m=1)
    with_ldmatrix = plain.with_(ldmatrix=True)
    multistage = with_ldmatrix.with_(stages=3, async_copy=has_cp_async)
    swizzled = multistage.with_(swizzle=True)
    warp_tiles = swizzled.with_(bm=128, bn=128, wm=64, wn=64)
    return [
        ("smem_mma", plain),
        ("ldmatrix", with_ldmatrix),
        ("multistage", multistage),
        ("swizzle", swizzled),
        ("warp_tiles", warp_tiles),
        ("tuned", _deep_tile(arch)),
    ]


def _wide_tile(arch: str) -> MmaConfig:
    """128x256 tiles of 8 warps (64x64), 64-byte slices, 4 stages (fewer where shared memory is
    short): the tuned step until 2026-11-26, and still the default where an operand's rows take
    copies narrower than 16 bytes (3000x5000x1500 nn bf16, A's rows 8-byte aligned: 142.8 us against
    151.9 for 128-byte slices and 170.3 for 256x128, H100)."""
    wide = MmaConfig(bm=128, bn=256, k_bytes=64, wm=64, wn=64, stages=4, group_m=8, async_copy=arch_number(arch) >= 80)
    return wide.with_(stages=_fitting_stages(wide, arch, 4))


def _deep_tile(arch: str) -> MmaConfig:
    """256x128 tiles of 8 warps (64x64), 128-byte slices, 4 stages (192 KiB): one barrier per four
    k-steps instead of two, and the strided 16-byte copies leave each slice one pointer add of address
    work. Forced bf16 4096^3 nt on an H100 (2026-11-26, staged write-back): 286.7 us against 292.6 for
    128x256 with the same slices and 321.1 for 128x256 with 64-byte slices. Where three 128-byte
    stages do not fit (sm_86, sm_89: 99 KiB a block) it keeps 64-byte slices, not measured there."""
    deep = MmaConfig(bm=256, bn=128, k_bytes=128, wm=64, wn=64, stages=4, group_m=8, async_copy=arch_number(arch) >= 80)
    if _fitting_stages(deep, arch, 4) >= 3:
        return deep.with_(stages=_fitting_stages(deep, arch, 4))
    shallow = deep.with_(k_bytes=64)
    return shallow.with_(stages=_fitting_stages(shallow, arch, 4))


def copy_width(stored_row: int, elem: int) -> int:
    """The widest copy every stored row allows: 16, 8, 4 bytes, else one 2-byte element."""
    for width in (16, 8, 4):
        if width >= elem and stored_row * elem % width == 0:
            return width
    return elem


def operand_extent(spec: GemmSpec, name: str) -> int:
    """Operand `name`'s dimension that is not K: M for A, N for B."""
    return spec.m if name == "A" else spec.n


def stored_row(spec: GemmSpec, name: str, k_major: bool) -> int:
    """Elements per stored row of operand `name` ("A" or "B"): K where it is K-major, else its extent."""
    return spec.k if k_major else operand_extent(spec, name)


def ldmatrix_reads(spec: GemmSpec, k_major: bool) -> bool:
    """Whether ldmatrix can read an operand's tile: it moves 16-bit units, so a K-major tf32 tile reads
    right and an MN-major one would need a 32-bit transpose (it keeps plain loads)."""
    return INPUT_BYTES[tensor_dtype(spec)] == 2 or k_major


def shape_class(spec: GemmSpec) -> tuple[int, int]:
    """The copy widths of A and B (16, 8, 4 or 2 bytes), which the stored rows' lengths decide: a
    config measured on one width says little about another (128x256 with 64-byte slices ran
    4096^3 in 349 us and 4093x4091x4097, whose rows are copied 2 bytes at a time, in 2028)."""
    elem = INPUT_BYTES[tensor_dtype(spec)]
    return copy_width(stored_row(spec, "A", not spec.a_trans), elem), copy_width(stored_row(spec, "B", spec.b_trans), elem)


def ldmatrix_rows(spec: GemmSpec) -> bool:
    """Whether both operands' stored rows take 16-byte copies (the strided cp.async path) and both
    tiles are read by ldmatrix (ldmatrix_reads: 16-bit types, or tf32 with K-major A and B): the tuned step's 128-byte
    slices were measured only there."""
    return shape_class(spec) == (16, 16) and ldmatrix_reads(spec, not spec.a_trans) and ldmatrix_reads(spec, spec.b_trans)


def register_copied(spec: GemmSpec) -> bool:
    """Whether an operand's stored rows have odd length in 16-bit elements: those rows are copied
    element-wise through registers (cp.async cannot place 2-byte pieces)."""
    return spec.dtype in ("bf16", "fp16") and bool(spec.k % 2 or (spec.a_trans and spec.m % 2)
                                                     or (not spec.b_trans and spec.n % 2))


def _two_per_sm(spec: GemmSpec | None, arch: str) -> MmaConfig:
    """128x128 tiles of 4 warps (64x64 each) that two blocks share an SM with; 2-byte operands (rows of
    odd length) take 32-byte slices so their next slice fits in registers across the mma work."""
    two = MmaConfig(bm=128, bn=128, k_bytes=64, wm=64, wn=64, stages=4, group_m=8, blocks_per_sm=2)
    if spec is not None and register_copied(spec):
        two = two.with_(k_bytes=32)
    if not known_arch(arch):
        return two.with_(stages=_fitting_stages(two, arch, 4), blocks_per_sm=1)
    per_sm = arch_limits(arch).smem_per_sm // 2 - 1024
    return two.with_(stages=max(2, min(two.stages if two.k_bytes == 64 else 5, per_sm // two.stage_bytes())))


def _register_copied_tile(arch: str) -> MmaConfig:
    """For rows of odd length: 128x256 tiles of 8 warps, one block per SM, 32-byte slices, 5 stages.
    The only shape measured to keep the register-copied next slice in registers across the mma work
    (render.staged_in_registers) with a full tile: 4093x4091x4097 bf16 nt on an H100 (2026-11-25)
    1177 us against 2534 us for two 128x128 blocks per SM, whose copies wait on their loads."""
    tuned = _wide_tile(arch).with_(k_bytes=32)
    return tuned.with_(stages=_fitting_stages(tuned, arch, 5))


def default_config(spec: GemmSpec | None, arch: str = "sm_80") -> MmaConfig:
    """Where they fill half the SMs: the tuned step's 256x128 tiles with 128-byte slices when both
    operands' rows take 16-byte copies, else 128x256 tiles with 64-byte slices (_wide_tile), and for
    rows of odd length 128x256 with 32-byte slices (_register_copied_tile); then 128x128, then 64x64
    tiles. Measured on an H100: 2026-11-25 (`git show 73f05e3:bench/results/2026-11-25-h100-mma.md`; 128x256 ran 4096^3
    bf16 nt in 342-347 us against 371-396 for two 128x128 blocks per SM) and 2026-11-26
    (`git show a5c16f7:bench/results/2026-11-26-h100-mma-deep-slices.md`; the tuned step 287 us)."""
    tuned = dict(ladder(arch))["tuned"]
    if spec is None:
        return tuned
    if splits_fp32(spec):
        return _split_default(spec, arch)
    if block_scaled(spec):
        return _block_default(spec, arch)
    if spec.fp8 and (fp8_emulated(arch) or spec.epilogue.reads_c):
        return _narrow_fp8_default(spec, arch)
    sms = geometry(None, arch).sm_count if known_arch(arch) else 80
    tiles = lambda c: -(-spec.m // c.bm) * -(-spec.n // c.bn)  # noqa: E731
    wide = _register_copied_tile(arch)
    if register_copied(spec) and supports(spec, arch) is None and not rejections(wide, spec, arch) \
            and tiles(wide) >= sms // 2:
        return wide
    wide = _wide_tile(arch)
    for candidate in (tuned if ldmatrix_rows(spec) else wide, wide.with_(bn=128), wide.with_(bm=64, bn=64, wm=32, wn=32)):
        candidate = candidate.with_(stages=_fitting_stages(candidate, arch, 4))
        if tiles(candidate) >= sms // 2:
            return candidate
    return candidate


def _split_candidates(arch: str) -> list[tuple[str, MmaConfig]]:
    """3xtf32's shapes: three mma per fragment pair and the split fragments beside the accumulators
    leave no room for 64x64 warp tiles (ptxas: ~264 registers), so 64x32 and 32x32 warps."""
    base = MmaConfig(bm=128, bn=128, k_bytes=64, wm=64, wn=32, stages=4, group_m=8)
    return [
        ("3x_128x128_w64x32", base.with_(stages=_fitting_stages(base, arch, 4))),
        ("3x_128x128_w32x64", base.with_(wm=32, wn=64, stages=_fitting_stages(base, arch, 4))),
        ("3x_128x128_w32x32_2sm", base.with_(wm=32, wn=32, stages=3, blocks_per_sm=2)),
        ("3x_128x128_w64x32_k32", base.with_(k_bytes=32, stages=_fitting_stages(base.with_(k_bytes=32), arch, 5))),
        ("3x_128x64_w32x32_2sm", base.with_(bn=64, wm=32, wn=32, stages=4, blocks_per_sm=2)),
        ("3x_64x64_w32x32", MmaConfig(bm=64, bn=64, k_bytes=64, wm=32, wn=32, stages=4, group_m=8)),
    ]


def _split_default(spec: GemmSpec, arch: str) -> MmaConfig:
    """3xtf32: 128x128 tiles of 8 warps (64x32) where they fill half the SMs, else 64x64 tiles."""
    sms = geometry(None, arch).sm_count if known_arch(arch) else 80
    named = dict(_split_candidates(arch))
    wide, small = named["3x_128x128_w64x32"], named["3x_64x64_w32x32"]
    return wide if -(-spec.m // wide.bm) * -(-spec.n // wide.bn) >= sms // 2 else small


def _block_candidates(arch: str) -> list[tuple[str, MmaConfig]]:
    """fp8 block scales: a thread holds its warp tile's sums twice (one k-block's raw sums, and the scaled
    total), so warp tiles of 64x32 or 32x32 (as 3xtf32's); 128-byte slices are one k-block each. Not
    measured on a GPU yet."""
    base = MmaConfig(bm=128, bn=128, k_bytes=128, wm=64, wn=32, stages=4, group_m=8)
    return [
        ("fp8b_128x128_w64x32", base.with_(stages=_fitting_stages(base, arch, 4))),
        ("fp8b_128x128_w32x64", base.with_(wm=32, wn=64, stages=_fitting_stages(base, arch, 4))),
        ("fp8b_128x128_w64x32_k64", base.with_(k_bytes=64, stages=_fitting_stages(base.with_(k_bytes=64), arch, 4))),
        ("fp8b_64x64_w32x32", MmaConfig(bm=64, bn=64, k_bytes=128, wm=32, wn=32, stages=4, group_m=8)),
        ("fp8b_128x64_w32x32_k64", MmaConfig(bm=128, bn=64, k_bytes=64, wm=32, wn=32, stages=4, group_m=8)),
    ]


def _narrow_fp8_default(spec: GemmSpec, arch: str) -> MmaConfig:
    """fp8 tensor / rowwise scales where mma.sync is emulated (sm_100; sm_90 asked by name) or the epilogue
    reads C (the fp8 rule: 64 sums a thread at most): 128x128 tiles of 8 warps (32x64), 64-byte slices, the
    shape NVRTC 13.0 compiled without spills on sm_89, sm_90, sm_100 and sm_120 (64x64 warps, and 128-byte
    slices of 64x32 ones on sm_90 / sm_100, spill); 64x64 tiles for small grids. Not measured."""
    sms = geometry(None, arch).sm_count if known_arch(arch) else 80
    wide = MmaConfig(bm=128, bn=128, k_bytes=64, wm=32, wn=64, stages=4, group_m=8)
    wide = wide.with_(stages=_fitting_stages(wide, arch, 4))
    small = MmaConfig(bm=64, bn=64, k_bytes=64, wm=32, wn=32, stages=4, group_m=8)
    return wide if -(-spec.m // wide.bm) * -(-spec.n // wide.bn) >= sms // 2 else small


def _block_default(spec: GemmSpec, arch: str) -> MmaConfig:
    """fp8 block scales: 128x128 tiles of 8 warps (64x32) where they fill half the SMs, else 64x64 tiles;
    where fp8 mma.sync is emulated (sm_90, sm_100), 128x64 tiles of 8 warps (32x32) with 64-byte slices
    (NVRTC 13.0: no spills there; 64x32 warps spilled 40-100 B)."""
    sms = geometry(None, arch).sm_count if known_arch(arch) else 80
    named = dict(_block_candidates(arch))
    wide, small = named["fp8b_128x128_w64x32"], named["fp8b_64x64_w32x32"]
    if fp8_emulated(arch):
        wide = MmaConfig(bm=128, bn=64, k_bytes=64, wm=32, wn=32, stages=4, group_m=8)
    return wide if -(-spec.m // wide.bm) * -(-spec.n // wide.bn) >= sms // 2 else small


def candidates(spec: GemmSpec, arch: str = "sm_80") -> list[tuple[str, MmaConfig]]:
    """A few named configs of proven shapes to time against the default (each valid for `spec` on
    `arch`): gemmtune.build(spec, config=c, family="mma")."""
    tuned = dict(ladder(arch))["tuned"]
    two = _two_per_sm(spec, arch)
    if block_scaled(spec):
        return valid_named([("default", default_config(spec, arch))] + _block_candidates(arch), rejections, spec, arch)
    named = [("default", default_config(spec, arch))] + _split_candidates(arch) if splits_fp32(spec) else [
        ("default", default_config(spec, arch)),
        ("tuned", tuned),
        ("128x256_k64", _wide_tile(arch)),
        ("128x256_k128", tuned.with_(bm=128, bn=256)),
        ("128x128_k128_2sm", two.with_(k_bytes=128, stages=3)),
        ("128x128_2sm", two),
        ("128x128_k32_2sm", two.with_(k_bytes=32, stages=5)),
        ("128x128_8warps_2sm", two.with_(wn=32, blocks_per_sm=2)),
        ("128x256_s3", _wide_tile(arch).with_(stages=_fitting_stages(_wide_tile(arch), arch, 3))),
        ("128x256_k32_s5", _register_copied_tile(arch)),
        ("256x128_s3", tuned.with_(stages=_fitting_stages(tuned, arch, 3))),
        ("128x128_1sm", two.with_(blocks_per_sm=1, stages=_fitting_stages(two, arch, 4))),
    ]
    return valid_named(named, rejections, spec, arch)
