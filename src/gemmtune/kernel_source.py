"""KernelSource: the one artifact every generator family ends in.

CUDA text plus everything needed to launch it without knowing who wrote it: entry name, grid,
block, dynamic shared memory and the argument order. Compiling, verifying, timing and exporting
work on this type alone, so a TVM kernel and a native kernel are treated the same.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from .spec import GemmSpec

# Argument kinds a kernel may take, in the names the runtime binds them by.
POINTER_ARGS = ("A", "B", "C", "bias", "D", "offs",  # offs: a grouped GEMM's group end rows (int32)
                "scale_a", "scale_b")  # fp8: float32 scales of A (one, or one a row) and B (one, or one a column)
SCALAR_ARGS = ("alpha", "beta")
TENSOR_MAP_DTYPES = {"fp16": 2, "bf16": 2, "fp32": 4, "e4m3": 1, "e5m2": 1}  # storage types a tensor map may describe (bytes)
SWIZZLES = (0, 32, 64, 128)


@dataclass(frozen=True)
class TensorMapArg:
    """A TMA descriptor parameter (``const __grid_constant__ CUtensorMap``), 128 bytes passed by value.

    The kernel names it; the host builds it at bind time with cuTensorMapEncodeTiled from the device
    pointer bound to `operand`, so a launcher (the runtime, an export's harness) rebuilds it from
    this description alone. Extents are innermost first, as the driver takes them. Elements outside
    the extents read as zero (TMA's out-of-bounds fill), which is how partial edge tiles stay correct.
    """

    name: str  # the kernel parameter, e.g. "tma_A"
    operand: str  # the pointer it describes: one of POINTER_ARGS
    dtype: str  # storage type: fp16, bf16 or fp32
    dims: tuple[int, ...]  # global extents in elements, innermost first
    strides: tuple[int, ...]  # byte strides of dims[1:] (rank - 1 values)
    box: tuple[int, ...]  # elements one copy moves along each dim, innermost first
    swizzle: int = 128  # bytes: 0 (none), 32, 64 or 128

    def __post_init__(self) -> None:
        rank = len(self.dims)
        if self.operand not in POINTER_ARGS:
            raise ValueError(f"tensor map {self.name} describes unknown operand {self.operand!r}")
        if self.dtype not in TENSOR_MAP_DTYPES or self.swizzle not in SWIZZLES:
            raise ValueError(f"tensor map {self.name}: dtype {self.dtype!r} / swizzle {self.swizzle} unsupported")
        if not 1 <= rank <= 5 or len(self.box) != rank or len(self.strides) != rank - 1:
            raise ValueError(f"tensor map {self.name}: rank {rank} needs {rank} box extents and {rank - 1} strides")
        if any(s % 16 for s in self.strides):
            raise ValueError(f"tensor map {self.name}: byte strides {self.strides} must be multiples of 16")
        if any(not 1 <= b <= 256 for b in self.box):
            raise ValueError(f"tensor map {self.name}: box extents {self.box} must lie in 1..256")

    @property
    def element_bytes(self) -> int:
        return TENSOR_MAP_DTYPES[self.dtype]

    def to_json(self) -> dict:
        return {"name": self.name, "operand": self.operand, "dtype": self.dtype, "dims": list(self.dims),
                "strides": list(self.strides), "box": list(self.box), "swizzle": self.swizzle}

    @staticmethod
    def from_json(data: dict) -> "TensorMapArg":
        return TensorMapArg(data["name"], data["operand"], data["dtype"], tuple(data["dims"]),
                            tuple(data["strides"]), tuple(data["box"]), data.get("swizzle", 128))


@dataclass(frozen=True)
class StagedOperand:
    """An operand the launcher copies, before each launch, into a workspace whose rows start every
    `pitch` bytes (a multiple of 128); the kernel's tensor maps of `operand` describe the workspace.

    TMA needs rows that start on 16-byte boundaries, and loads at about half rate from rows that
    start only 16 bytes off a 32-byte sector; the copy (each byte read and written once, by the
    staging kernel where `KernelSource.stage_kernel`, else by cudaMemcpy2DAsync) can cost less than
    either (docs/staging.md). The caller's array is stored as `rows` contiguous rows of
    `row_bytes` bytes, as the spec's layout says; the workspace's padding is never read (the maps'
    extents stop at the row's end).
    """

    operand: str  # "A" or "B"
    rows: int
    row_bytes: int
    pitch: int

    def __post_init__(self) -> None:
        if self.operand not in ("A", "B") or self.pitch % 128 or self.pitch < self.row_bytes:
            raise ValueError(f"staged {self.operand}: pitch {self.pitch} must be a multiple of 128 "
                             f"holding a {self.row_bytes}-byte row")

    @property
    def workspace_bytes(self) -> int:
        return self.rows * self.pitch

    def to_json(self) -> dict:
        return {"operand": self.operand, "rows": self.rows, "row_bytes": self.row_bytes, "pitch": self.pitch}

    @staticmethod
    def from_json(data: dict) -> "StagedOperand":
        return StagedOperand(data["operand"], data["rows"], data["row_bytes"], data["pitch"])


def _declares_module_memory(line: str) -> bool:
    """`__device__ float4 partial_sums[...];` yes; `__device__ __forceinline__ void f(...)` and
    `__device__ float twice(float x) {` no: a declaration at the line's start that ends in `;` with
    no parenthesis outside its brackets."""
    if not line.startswith("__device__ "):
        return False
    head = line.split("//")[0].strip()
    return head.endswith(";") and "(" not in re.sub(r"\[[^\]]*\]", "", head)


# The most blocks a cluster may have on every GPU that has clusters (sm_90+); up to 16 on an H100 once
# the kernel allows non-portable sizes (CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED).
PORTABLE_CLUSTER_BLOCKS = 8


@dataclass(frozen=True)
class KernelSource:
    code: str
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[str, ...]  # names from POINTER_ARGS/SCALAR_ARGS in the kernel's parameter order
    spec: GemmSpec
    family: str
    family_version: str
    config: dict = field(default_factory=dict, compare=False, hash=False)
    dynamic_smem: int = 0
    # Optional compiler flags the kernel needs (e.g. TVM sources want --use_fast_math off).
    options: tuple[str, ...] = ()
    # TMA descriptors among `args` (by name), built on the host at bind time.
    tensor_maps: tuple[TensorMapArg, ...] = ()
    # Uses arch-specific instructions (wgmma, setmaxnreg): compiled for e.g. sm_90a, not sm_90.
    arch_specific: bool = False
    # Every block must be resident at once (blocks wait on each other's results): a persistent grid
    # sized for one GPU may hang on a smaller one, so the runtime checks occupancy before launching.
    co_resident: bool = False
    # Operands copied into 128-byte-pitched workspaces before each launch (their tensor maps read those).
    staged: tuple[StagedOperand, ...] = ()
    # `code` also holds the kernel that makes those copies (kernels/parts/staging.py: `<entry>_stage`,
    # each staged operand's source and workspace as its parameters); without it (sources written before
    # it existed) the runtime copies with cuMemcpy2DAsync.
    stage_kernel: bool = False
    # Starts with the dependent-launch prologue (kernels/parts/dependent_launch.py): the runtime
    # launches it with programmatic stream serialization, so it overlaps the kernel before it.
    dependent_launch: bool = False
    # Blocks per cluster where the host must know them: above PORTABLE_CLUSTER_BLOCKS (a cluster of 16,
    # sm_90+) the launch must first allow non-portable cluster sizes. 1 for kernels without clusters and
    # for those whose __cluster_dims__ stay portable.
    cluster_blocks: int = 1

    def __post_init__(self) -> None:
        names = POINTER_ARGS + SCALAR_ARGS + tuple(t.name for t in self.tensor_maps)
        unknown = [a for a in self.args if a not in names]
        if unknown:
            raise ValueError(f"unknown kernel argument names {unknown}")
        if "D" not in self.args:
            raise ValueError("a GEMM kernel must take its output D")

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def module_state(self) -> bool:
        """Whether the code declares memory of its own at module scope (`__device__` arrays: split-K
        partial tiles and the flags blocks wait on, left zeroed by every launch for the next). Two
        launches of one loaded module must then not run at once (stream_order.py)."""
        return any(_declares_module_memory(line) for line in self.code.splitlines())

    @property
    def keeps_state(self) -> bool:
        """Whether launches share memory of the kernel's own: module memory, or a staged operand's
        workspace (which belongs to the loaded kernel). Its launches then take turns across streams
        (stream_order.py, and the exported launcher's twin)."""
        return self.module_state or bool(self.staged)

    def content_hash(self) -> str:
        """Hash of everything that changes the compiled binary."""
        payload = json.dumps({"code": self.code, "entry": self.entry, "options": list(self.options)},
                             sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:20]

    def to_json(self) -> dict:
        return {
            "code": self.code, "entry": self.entry, "grid": list(self.grid), "block": list(self.block),
            "args": list(self.args), "spec": self.spec.to_json(), "family": self.family,
            "family_version": self.family_version, "config": self.config,
            "dynamic_smem": self.dynamic_smem, "options": list(self.options),
            "tensor_maps": [t.to_json() for t in self.tensor_maps], "arch_specific": self.arch_specific,
            "co_resident": self.co_resident,
            **({"staged": [s.to_json() for s in self.staged]} if self.staged else {}),
            **({"stage_kernel": True} if self.stage_kernel else {}),
            **({"dependent_launch": True} if self.dependent_launch else {}),
            **({"cluster_blocks": self.cluster_blocks} if self.cluster_blocks > 1 else {}),
        }

    @staticmethod
    def from_json(data: dict) -> "KernelSource":
        return KernelSource(
            code=data["code"], entry=data["entry"], grid=tuple(data["grid"]), block=tuple(data["block"]),
            args=tuple(data["args"]), spec=GemmSpec.from_json(data["spec"]), family=data["family"],
            family_version=data["family_version"], config=data.get("config", {}),
            dynamic_smem=data.get("dynamic_smem", 0), options=tuple(data.get("options", ())),
            tensor_maps=tuple(TensorMapArg.from_json(t) for t in data.get("tensor_maps", ())),
            arch_specific=data.get("arch_specific", False), co_resident=data.get("co_resident", False),
            staged=tuple(StagedOperand.from_json(s) for s in data.get("staged", ())),
            stage_kernel=data.get("stage_kernel", False), dependent_launch=data.get("dependent_launch", False),
            cluster_blocks=data.get("cluster_blocks", 1),
        )

    def tensor_map(self, name: str) -> TensorMapArg | None:
        return next((t for t in self.tensor_maps if t.name == name), None)
