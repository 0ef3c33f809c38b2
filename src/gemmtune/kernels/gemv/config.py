"""The memory-bound family's Config: GEMV-shaped GEMMs in any dtype and layout: N = 1, or a few rows
of A (M ≤ MAX_ROWS, decode with a small batch).

With one row (or column) of output, every element of the big operand is used once; with R ≤ 16 rows
it is used R times from registers. Either way the kernel is a stream over that matrix, and its speed
limit is HBM bandwidth, not FLOPs. Two shapes of stream:
- ``rows`` ("dot"): the big matrix is contiguous along K, so a warp reduces one output's row with
  16-byte loads and a shuffle tree;
- ``columns`` ("axpy"): the big matrix is contiguous along the outputs, so a thread owns VEC
  neighbouring outputs, walks a share of K, and the block sums its K-shares in shared memory.
Which one a spec needs follows from its layout (``stream_kind``); the config sizes the blocks.

With 2-16 rows of 16-bit or tf32 A against a K-contiguous B (layout nt: decode with a small batch),
the R FMAs per loaded weight (plus the conversions) make the CUDA-core ``rows`` kernel compute bound;
``tensor_cores`` multiplies there with mma.sync m16n8k16 (m16n8k8 for tf32) instead (the rows of A
are its zero-padded 16-row A operand, B is already its ``.col`` B operand), still streaming B with
16-byte loads. With 2-16 rows of fp32 or tf32 A (stored M×K) against B stored K×N (layout nn),
the columns kernel is as compute bound; ``tensor_cores`` there takes B's rows as the mma's B
operand (columns_tensor_cores.py), fp32 as 3xtf32 (fp32 accuracy; math simt keeps CUDA cores).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...kernel_source import PORTABLE_CLUSTER_BLOCKS
from ...spec import GemmSpec
from ..config_base import STATIC_SMEM_LIMIT, FamilyConfig, arch_number, rejections_by
from ..wgmma.config import swap_ab_suits

NAME = "gemv"
VERSION = "1"
DTYPES = ("fp32", "tf32", "bf16", "fp16")
MAX_ROWS = 16  # rows of A the family takes (each a vector the streamed B meets)
# ... and the tensor-core rows kernel (layout nt): 16-row blocks of vectors, one mma each per tile of W, so W is
# still read once; past 16 rows only it runs (the CUDA-core kernels spend an FMA per row on every weight).
MAX_TENSOR_CORE_ROWS = 64
MAX_ACCUMULATORS = 64  # fp32 sums per thread: more spills once the loads in flight are counted
INPUT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
LOAD_BYTES = 16  # one vector load: 4 fp32 or 8 16-bit values
TENSOR_CORE_DTYPES = ("bf16", "fp16", "tf32")  # layout nt: mma.sync m16n8k16 (m16n8k8 for tf32), fp32 accumulators
COLUMNS_TENSOR_CORE_DTYPES = ("fp32", "tf32")  # layout nn: mma.sync m16n8k8 (fp32 as 3xtf32)
MIN_TENSOR_CORE_ROWS = 2  # one row of A would leave 15 of the mma's 16 rows empty: the rows kernel is better
MMA_TILES = (1, 2, 4)  # 8-output tiles per warp on the tensor-core path
MAX_TENSOR_CORE_LOADS = 16  # 16-byte loads of B per thread per step (4 registers each)


@dataclass(frozen=True, order=True)
class GemvConfig(FamilyConfig):
    """Parameters of one GEMV kernel.

    threads: threads per block.
    warps_per_output (rows kind): warps that share one group of outputs' K (1 = a warp per group);
      more give short-K shapes enough loads in flight.
    outputs_per_warp (rows kind): outputs one warp computes together, so each load of the vectors'
      chunk (from L1) serves that many rows of W (matters when there are several vectors).
    threads_x (columns kind): threads across the outputs in a block; the rest of the block's threads
      (threads / threads_x) split K. A warp reads threads_x·16 contiguous bytes of each of
      32/threads_x matrix rows, whole 32-byte sectors as long as threads_x ≥ 2.
    unroll: independent 16-byte loads each thread keeps in flight per step of its K loop (on the
      tensor-core path: per 8-output tile, so mma_tiles·unroll loads of B).
    tensor_cores (rows kind, layout nt, bf16/fp16/tf32, 2-16 rows of A, sm_80+): multiply on tensor
      cores with mma.sync m16n8k16 (m16n8k8 for tf32); warps_per_output warps share a group's K as
      on the CUDA-core path.
    mma_tiles (tensor_cores only): 8-output tiles one warp computes together, so each 16-byte load of
      A's rows serves that many tiles of B. tensor_cores=False and mma_tiles=1 are left out of the
      JSON, so configs (and database keys) from before the option stay as they were.
    k_splits (columns kind on CUDA cores, sm_90+): blocks that share each strip of outputs, each a
      contiguous share of K, launched as one cluster; their sums meet in the first block's shared
      memory, which adds them in split order (deterministic) and writes D. For few outputs, where the
      strips alone leave most SMs idle. 2-16 (16: a non-portable cluster, sm_90/sm_100); the kernel
      starts with the dependent-launch prologue. Nothing is kept between launches. 1 is left out of
      the JSON.
    ring_stages (columns kind in quads over fp32/tf32 on CUDA cores, sm_90+): 0 keeps W in registers;
      2-8 feed the kernel through a ring of that many shared-memory stages that one producer thread
      fills by TMA (columns_ring.py), so the bytes of W in flight no longer compete with the sums for
      registers. threads are then the consumer threads (one producer warp is added), and a stage holds
      4·unroll rows of W for each of the threads / threads_x threads along K. 0 is left out of the JSON.
    """

    threads: int = 256
    warps_per_output: int = 1
    threads_x: int = 8
    outputs_per_warp: int = 1
    unroll: int = 4
    tensor_cores: bool = False
    mma_tiles: int = 1
    k_splits: int = 1
    ring_stages: int = 0
    FAMILY_LABEL = "gemv"

    def to_json(self) -> dict:
        data = super().to_json()
        if not data["tensor_cores"]:  # configs (and database keys) from before the tensor-core path stay unchanged
            del data["tensor_cores"]
        if data["mma_tiles"] == 1:
            del data["mma_tiles"]
        if data["k_splits"] == 1:
            del data["k_splits"]
        if data["ring_stages"] == 0:
            del data["ring_stages"]
        return data

    def describe(self) -> str:
        if self.tensor_cores:
            return (f"gemv tensor cores {self.threads} threads, {self.warps_per_output} warp(s) per "
                    f"{8 * self.mma_tiles} outputs, unroll{self.unroll}")
        return (f"gemv {self.threads} threads, {self.warps_per_output} warp(s) per {self.outputs_per_warp} "
                f"output(s) (rows), {self.threads_x} across outputs (columns), unroll{self.unroll}"
                + (f", K split {self.k_splits} ways" if self.k_splits > 1 else "")
                + (f", TMA ring of {self.ring_stages} stages" if self.ring_stages else ""))

    def outputs_per_group(self) -> int:
        """Outputs the warps_per_output warps of one group compute (rows kind)."""
        return 8 * self.mma_tiles if self.tensor_cores else self.outputs_per_warp

    def outputs_per_block(self) -> int:
        """Outputs one block computes on the rows kind: its groups' outputs."""
        return self.threads // 32 // self.warps_per_output * self.outputs_per_group()


# --- what the spec asks for ----------------------------------------------------------------------
def streams_b(spec: GemmSpec) -> bool:
    """Whether W is B (a few rows of A are the vectors) rather than A (N = 1: B is the vector)."""
    return not (spec.n == 1 and spec.m > 1)


def outputs(spec: GemmSpec) -> int:
    """Outputs per vector: N when B is streamed, else M."""
    return spec.n if streams_b(spec) else spec.m


def vectors(spec: GemmSpec) -> int:
    """How many vectors meet W: the rows of A when B is streamed, else the one column of B."""
    return spec.m if streams_b(spec) else 1


def stream_kind(spec: GemmSpec) -> str:
    """'rows' when the streamed matrix is stored with K contiguous, 'columns' when the outputs are.

    B (K×N stored) is contiguous along N unless transposed; A (M×K stored) along K unless transposed."""
    if streams_b(spec):
        return "rows" if spec.b_trans else "columns"
    return "columns" if spec.a_trans else "rows"


def values_per_load(spec: GemmSpec) -> int:
    """Values of the spec's input type in one 16-byte load: 4 fp32/tf32 or 8 of a 16-bit type."""
    return LOAD_BYTES // INPUT_BYTES[spec.dtype]


def vec(spec: GemmSpec) -> int:
    """Elements per vector load of the matrix: 16 bytes when each stored row starts 16-byte aligned."""
    row = spec.k if stream_kind(spec) == "rows" else outputs(spec)
    per_load = values_per_load(spec)
    return per_load if row % per_load == 0 else 1


# From this many vectors on, a 4-byte columns kernel whose vectors are contiguous along K takes W's
# rows four at a time (quads), so each vector's four values at those k are one 16-byte load:
# a quarter of the loads of x that one row at a time needs (16 per row of W at R = 16).
QUAD_MIN_ROWS = 2


def quads(spec: GemmSpec) -> bool:
    """Whether the columns kernel walks K in quads: the columns kind with 4-byte values (VEC = 4), x = A
    stored M×K (A not transposed: then the columns kind streams B) with K a multiple of 4 (16-byte
    aligned rows), at least QUAD_MIN_ROWS vectors."""
    return (stream_kind(spec) == "columns" and not spec.a_trans and vec(spec) == 4
            and spec.k % 4 == 0 and vectors(spec) >= QUAD_MIN_ROWS)


def block_outputs(c: GemvConfig, s: GemmSpec) -> int:
    """Outputs one block of `c` computes for `s`: its groups' outputs on the rows kind and on tensor
    cores, threads_x vectors of VEC outputs on the CUDA-core columns kind (the grid is the outputs
    over this)."""
    return c.outputs_per_block() if stream_kind(s) == "rows" or c.tensor_cores else c.threads_x * vec(s)


# Up to how many rows of A family_for hands a spec to the tensor-core rows kernel rather than a tile family
# (asked by name, gemv runs up to MAX_TENSOR_CORE_ROWS).
CHOSEN_TENSOR_CORE_ROWS = 16


def yields(spec: GemmSpec, arch: str) -> str | None:
    """Why family_for passes gemv over for a spec it supports: past CHOSEN_TENSOR_CORE_ROWS rows a tile
    family is the faster (None: gemv runs it)."""
    if spec.n != 1 and spec.m > CHOSEN_TENSOR_CORE_ROWS:
        return f"past {CHOSEN_TENSOR_CORE_ROWS} rows of A a tile family runs it faster"
    if spec.n != 1 and swap_ab_suits(spec, arch):
        return "the wgmma family's swap-AB kernel streams B faster at these rows (wgmma.config.SWAP_AB_ROWS)"
    return None


def supports(spec: GemmSpec, arch: str) -> str | None:
    if spec.m > MAX_ROWS and spec.n != 1:
        wide = spec.m <= MAX_TENSOR_CORE_ROWS and spec.layout == "nt" and tensor_core_rejection(spec, arch) is None
        if not wide:
            return (f"gemv runs N = 1 or M ≤ {MAX_ROWS} (M ≤ {MAX_TENSOR_CORE_ROWS} on tensor cores: "
                    f"bf16, fp16 or tf32 in layout nt, sm_80+), not {spec.m}x{spec.n} {spec.layout} {spec.dtype}")
    if spec.dtype not in DTYPES:
        return f"gemv reads {', '.join(DTYPES)}, not {spec.dtype}"
    if spec.math == "3xtf32":
        refused = tensor_core_rejection(spec, arch)
        if refused is not None:
            return f"gemv runs 3xtf32 only on its tensor-core path, which does not take this spec: {refused}"
    if stream_kind(spec) == "columns" and vectors(spec) * vec(spec) > MAX_ACCUMULATORS:
        return (f"{vectors(spec)} rows × {vec(spec)} outputs per thread exceed {MAX_ACCUMULATORS} sums "
                f"(output-contiguous {spec.dtype} B takes M ≤ {MAX_ACCUMULATORS // vec(spec)})")
    return None


# --- constraints -----------------------------------------------------------------------------------
Constraint = Callable[[GemvConfig, GemmSpec, str], "str | None"]


def _threads(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    if c.threads not in (64, 128, 256, 512, 1024):
        return f"threads={c.threads}: 64, 128, 256, 512 or 1024"
    return None


def _rows(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    if c.warps_per_output not in (1, 2, 4, 8) or c.warps_per_output * 32 > c.threads:
        return f"warps_per_output={c.warps_per_output}: 1, 2, 4 or 8 and within the block's {c.threads // 32} warps"
    return None


def _columns(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    if c.threads_x not in (2, 4, 8, 16, 32):
        return f"threads_x={c.threads_x}: 2, 4, 8, 16 or 32 (whole 32-byte sectors per matrix row)"
    return None


def _unroll(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    return None if c.unroll in (1, 2, 4, 8) else f"unroll={c.unroll}: 1, 2, 4 or 8"


def _group(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    if c.outputs_per_warp not in (1, 2, 4, 8):
        return f"outputs_per_warp={c.outputs_per_warp}: 1, 2, 4 or 8"
    if c.outputs_per_warp * vectors(s) > MAX_ACCUMULATORS:
        return f"{c.outputs_per_warp} outputs × {vectors(s)} rows exceed {MAX_ACCUMULATORS} sums per thread"
    if c.outputs_per_warp * c.unroll > 16:
        return f"{c.outputs_per_warp} outputs × unroll {c.unroll} exceed 16 loads in flight per thread (registers)"
    return None


def _dtype(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    return supports(s, arch)


def tensor_core_rejection(s: GemmSpec, arch: str) -> str | None:
    """Why the tensor-core path cannot run `s` on `arch` (None: it can): layout nt in bf16, fp16 or
    tf32 (the rows kernel), layout nn in fp32 or tf32 (the columns kernel)."""
    if s.layout == "nn":
        if s.dtype not in COLUMNS_TENSOR_CORE_DTYPES:
            return (f"tensor_cores in layout nn multiplies {' or '.join(COLUMNS_TENSOR_CORE_DTYPES)}, not {s.dtype} "
                    f"(16-bit values pair along K in a register: layout nt)")
        if s.math == "simt":
            return "math simt multiplies fp32 on CUDA cores (tensor_cores runs fp32 as 3xtf32)"
    elif s.layout != "nt":
        return (f"tensor_cores needs layout nt (bf16, fp16, tf32) or nn (fp32, tf32): A stored M×K, so 16-byte "
                f"loads of its rows feed the mma fragments; not {s.layout}")
    elif s.dtype not in TENSOR_CORE_DTYPES:
        return (f"tensor_cores in layout nt multiplies {' or '.join(TENSOR_CORE_DTYPES)}, not {s.dtype} "
                f"(fp32: layout nn)")
    most = MAX_TENSOR_CORE_ROWS if s.layout == "nt" else MAX_ROWS
    if not MIN_TENSOR_CORE_ROWS <= vectors(s) <= most:
        return (f"tensor_cores takes {MIN_TENSOR_CORE_ROWS}-{most} rows of A in layout {s.layout} "
                f"(the mma's 16 rows{', in blocks of 16' if most > 16 else ''}), not {vectors(s)}")
    if arch_number(arch) < 80:
        return f"tensor_cores needs mma.sync for bf16 and tf32 (sm_80+), not {arch}"
    piece = values_per_load(s)
    if s.k % piece:
        return f"tensor_cores reads K in 16-byte pieces of {piece} values: K = {s.k} is not a multiple of {piece}"
    return None


def _tensor_cores(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    if not c.tensor_cores:
        if vectors(s) > MAX_ROWS:
            return f"{vectors(s)} rows of A: past {MAX_ROWS} only the tensor-core kernel runs (tensor_cores=True)"
        if s.math == "3xtf32":
            return "math 3xtf32 runs on the tensor-core path (tensor_cores=True)"
        return None if c.mma_tiles == 1 else f"mma_tiles={c.mma_tiles} is a tensor_cores option (1 without it)"
    if c.mma_tiles not in MMA_TILES:
        return f"mma_tiles={c.mma_tiles}: {', '.join(map(str, MMA_TILES))}"
    if c.outputs_per_warp != 1:
        return f"outputs_per_warp={c.outputs_per_warp}: the tensor-core path groups outputs by mma_tiles (leave it 1)"
    if c.mma_tiles * c.unroll > MAX_TENSOR_CORE_LOADS:  # in layout nn: 4·unroll loads of mma_tiles words, as many registers
        return (f"{c.mma_tiles} mma tiles × unroll {c.unroll} exceed {MAX_TENSOR_CORE_LOADS} loads of B in "
                f"flight per thread (registers)")
    rejected = tensor_core_rejection(s, arch)
    if rejected is None and tensor_core_smem_bytes(c, s) > STATIC_SMEM_LIMIT:
        return (f"{tensor_core_smem_bytes(c, s)} B of partial tiles exceed the {STATIC_SMEM_LIMIT} B of static "
                f"shared memory (fewer warps per output, tiles or rows)")
    if rejected is None and s.layout == "nn" and s.n % c.mma_tiles:
        return (f"mma_tiles={c.mma_tiles}: a lane loads that many neighbouring outputs of a row of B (aligned), "
                f"and N = {s.n} is not a multiple of it")
    return rejected


def a_fragment_rows(s: GemmSpec) -> int:
    """16-byte loads of A per chunk on the tensor-core path: rows g and g + 8 of each 16-row block of
    the mma's A, or only row g where M ≤ 8 (rows 8-15 are all zero padding)."""
    return 1 if vectors(s) <= 8 else 2 * -(-vectors(s) // 16)



def tensor_core_smem_bytes(c: GemvConfig, s: GemmSpec) -> int:
    """Static shared memory of the tensor-core kernel: every warp's partial tiles where WPO > 1."""
    return 0 if c.warps_per_output == 1 else 4 * (c.threads // 32) * c.mma_tiles * 2 * a_fragment_rows(s) * 32


def estimated_registers(c: GemvConfig, s: GemmSpec) -> int:
    """Live 32-bit values per thread: sums, 16-byte loads in flight, unpacked values, ~24 for addresses."""
    v = vec(s)
    if c.ring_stages:  # sums, a quad of W and a vector's quad from shared memory, addresses
        return vectors(s) * 4 + 16 + 4 + 24
    if c.tensor_cores:  # fp32 sums of each 16x8 tile, B and A loads in flight, a pointer per row of B
        split = 4 * c.mma_tiles + 8 if s.dtype == "fp32" else 0  # 3xtf32: a chunk's tile sums, the residuals
        sums = 4 * max(1, a_fragment_rows(s) // 2)  # a 16x8 tile per block of 16 rows
        return c.mma_tiles * (sums + 4 * c.unroll + 2) + 4 * c.unroll * a_fragment_rows(s) + 24 + split
    if stream_kind(s) == "rows":
        return c.outputs_per_warp * (vectors(s) + 4 * c.unroll + v) + v + 24
    return vectors(s) * v + 4 * c.unroll + v + 24


def _registers(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    warps = block_threads(c) // 32
    # A block's warps share the SM's 64K registers, spread over its 4 partitions of 16K: the fullest holds
    # ceil(warps / 4) warps (17 warps: 5, so ptxas caps 544 threads at 96 registers, not 120), counted in 8s.
    budget = min(255, 16384 // (32 * -(-warps // 4)) // 8 * 8)
    need = estimated_registers(c, s)
    if need > budget:
        return f"~{need} registers per thread exceed the {budget} that {32 * warps} threads per block may use"
    return None


K_SPLITS = (1, 2, 4, 8, 16)  # a strip's splits are one cluster: 16 is past PORTABLE_CLUSTER_BLOCKS
WIDE_CLUSTER_ARCHS = (90, 100)  # where clusters of 16 exist (H100/H200, B200); other GPUs keep to 8
MIN_SPLIT_K = 64  # K values a split must at least hold
SPLIT_SUMS_MAX_BYTES = 16384  # the first block's shared memory for every split's sums
PARTIAL_SUMS_BYTES = 16384  # the block's buffer of warp sums (render.py's GROUP_FIT)


def _k_splits(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    if c.k_splits == 1:
        return None
    if c.k_splits not in K_SPLITS:
        return f"k_splits={c.k_splits}: {', '.join(map(str, K_SPLITS))}"
    if c.tensor_cores or stream_kind(s) != "columns":
        return "k_splits splits K for the columns kernel on CUDA cores (W stored along the outputs)"
    if arch_number(arch) < 90:
        return f"k_splits meets the splits in a cluster's shared memory: sm_90 and later, not {arch}"
    if c.k_splits > PORTABLE_CLUSTER_BLOCKS and arch_number(arch) not in WIDE_CLUSTER_ARCHS:
        return f"k_splits={c.k_splits} needs clusters of {c.k_splits} blocks: sm_90 or sm_100, not {arch}"
    if s.k < MIN_SPLIT_K * c.k_splits:
        return f"K = {s.k} over {c.k_splits} splits leaves under {MIN_SPLIT_K} values a split"
    if vectors(s) * block_threads(c) // 32 * c.threads_x * vec(s) * 4 > PARTIAL_SUMS_BYTES:
        # one pass over the vectors, so that no block barrier follows the cluster wait (gemv/render.py)
        return f"{vectors(s)} vectors of warp sums exceed the {PARTIAL_SUMS_BYTES} B a K split sums in one pass"
    if c.k_splits * vectors(s) * c.threads_x * vec(s) * 4 > SPLIT_SUMS_MAX_BYTES:
        return f"{c.k_splits} splits of {vectors(s)} vectors × {c.threads_x * vec(s)} outputs exceed {SPLIT_SUMS_MAX_BYTES} B of sums"
    return None


RING_STAGES = (0, 2, 3, 4, 6, 8)
PRODUCER_WARPS = 1  # the ring kernel's, after its consumers: its first lane issues every copy
RING_DTYPES = ("fp32", "tf32")
MAX_TMA_BOX = 256  # elements a TMA box copy moves along each dimension
MAX_RING_BYTES = 220 * 1024  # of the 227 KB of shared memory a block may have on sm_90


def block_threads(c: GemvConfig) -> int:
    """Threads a block of `c` launches: its threads, and the ring kernel's producer warp."""
    return c.threads + (32 * PRODUCER_WARPS if c.ring_stages else 0)


def ring_stage_rows(c: GemvConfig) -> int:
    """Rows of W (values of K) one stage of the ring holds: unroll quads for each of the threads along K."""
    return 4 * (c.threads // c.threads_x) * c.unroll


def ring_strip_bytes(c: GemvConfig) -> int:
    """Bytes of W in one stage: the block's strip (4·threads_x fp32 outputs) of each of the stage's rows."""
    return 4 * ring_stage_rows(c) * 4 * c.threads_x


def ring_smem_bytes(c: GemvConfig, s: GemmSpec) -> int:
    """The ring's dynamic shared memory: each slot a stage's strip of W, then the same values of K of every
    vector."""
    return c.ring_stages * (ring_strip_bytes(c) + 4 * ring_stage_rows(c) * vectors(s))


def ring_reduction_bytes(c: GemvConfig, s: GemmSpec) -> int:
    """Bytes the consumer warps' partial sums take when they meet in the idle ring."""
    return 4 * (c.threads // 32) * vectors(s) * 4 * c.threads_x


def _ring(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    if c.ring_stages == 0:
        return None
    if c.ring_stages not in RING_STAGES:
        return f"ring_stages={c.ring_stages}: {', '.join(map(str, RING_STAGES))}"
    if c.tensor_cores or c.k_splits > 1:
        return "ring_stages feeds the CUDA-core columns kernel (not with tensor_cores or k_splits)"
    if arch_number(arch) < 90:
        return f"ring_stages copies W by TMA: sm_90 and later, not {arch}"
    if s.dtype not in RING_DTYPES or not quads(s):
        return ("ring_stages runs the columns kernel in quads over fp32 or tf32: layout nn with A stored M×K, "
                f"N and K multiples of 4, {QUAD_MIN_ROWS}-{MAX_ROWS} rows of A")
    if c.threads > 512:
        return f"threads={c.threads}: the ring kernel adds a producer warp, so at most 512 consumer threads"
    rows = ring_stage_rows(c)
    if rows > MAX_TMA_BOX:
        return (f"a stage of {rows} rows (4 × unroll {c.unroll} × {c.threads // c.threads_x} threads along K) "
                f"exceeds TMA's {MAX_TMA_BOX}-row box")
    ring = ring_smem_bytes(c, s)
    if ring > MAX_RING_BYTES:
        return f"a ring of {ring} B exceeds {MAX_RING_BYTES} B of shared memory"
    if ring_reduction_bytes(c, s) > ring:
        return f"the warps' partial sums ({ring_reduction_bytes(c, s)} B) do not fit the {ring} B ring"
    return None


CONSTRAINTS: dict[str, Constraint] = {
    "dtype": _dtype, "threads": _threads, "rows": _rows, "columns": _columns, "unroll": _unroll, "group": _group,
    "tensor_cores": _tensor_cores, "registers": _registers, "k_splits": _k_splits,
    "ring_stages": _ring,
}


def rejections(config: GemvConfig, spec: GemmSpec, arch: str = "sm_90") -> dict[str, str]:
    return rejections_by(CONSTRAINTS, config, spec, arch)


def ladder(arch: str = "sm_90") -> list[tuple[str, GemvConfig]]:
    """Named starting points: a plain one, and ones with more loads in flight."""
    return [
        ("warp_per_output", GemvConfig(threads=128, warps_per_output=1, threads_x=32, unroll=1)),
        ("unrolled", GemvConfig(threads=256, warps_per_output=1, threads_x=8, unroll=4)),
        ("wide_blocks", GemvConfig(threads=512, warps_per_output=2, threads_x=4, unroll=4)),
    ]


def default_config(spec: GemmSpec | None, arch: str = "sm_90") -> GemvConfig:
    """Enough 16-byte loads in flight to cover HBM latency on an H100 for the shapes it sees."""
    return dict(ladder(arch))["unrolled"]
