"""GemmSpec: what to compute. D[M×N] = epilogue(op(A)·op(B)), all matrices row-major in memory.

Types: ``dtype`` is the type of A and B. fp32: fp32 products; tf32: fp32 data whose products the
tensor cores form from tf32 (10-bit mantissa) inputs; fp16 / bf16: 16-bit A and B. Accumulation and
the epilogue are always fp32. ``out_dtype`` is the storage type of D and of the epilogue's C and
bias: the input type for fp16/bf16, fp32 for fp32/tf32; fp16/bf16 inputs may ask for fp32 out.

``math`` says how fp32 inputs are multiplied (it applies to fp32 only): "simt" on CUDA cores;
"3xtf32" on tensor cores, each operand split into a tf32 big part and a tf32 residual and the three
significant products summed (fp32 accuracy); "tf32" is the tf32 dtype (one tf32 product, lower
accuracy); "auto" (the default) lets the registry pick the fastest method that keeps fp32 accuracy
(see gemmtune.precision).

fp8 (issue 70): ``dtype`` e4m3 or e5m2 (OCP FP8; see gemmtune.fp8) with a ``scaling`` of the operands, "tensor"
(one scale each), "rowwise" (one a row of A and one a column of B) or "block" (A in 1×128 groups along K, B in
128×128 blocks); D = (A·scale_a)(B·scale_b) in fp32 sums, stored as ``out_dtype`` bf16 (the default) or fp16.
fp8 wgmma reads K-major operands only, so fp8 specs take layout nt. ``scaling`` is "none" for other dtypes and
then left out of names and JSON, so the keys of every spec written before fp8 stay as they were.

Gated (SwiGLU) GEMMs: ``gated`` makes D = silu(A·Wgᵀ) ⊙ (A·Wuᵀ), one kernel over one weight holding both
(Llama-style MLPs' gate and up projections). ``n`` is the OUTPUT width N; B (layout nt, bf16/fp16) has 2N rows
interleaved by 8 (``interleave_gate_up``): for output columns [8q, 8q+8) the gate rows are B rows
[16q, 16q+8) and the matching up rows [16q+8, 16q+16). The tensor cores run an ordinary GEMM of N' = 2N
columns (``gemm_n``; FLOPs 2·M·2N·K); the kernel compacts each gate/up pair of its accumulators to one output
before the write-back. Left out of names and JSON when False, so every earlier key stays.

Layout letters follow BLAS: the first describes A, the second B; 'n' means the operand is stored
as used (A: M×K, B: K×N), 't' means it is stored transposed (A: K×M, B: N×K). So ``nt`` is A·Bᵀ
with B kept as N×K, the usual layout of a linear layer's weight.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from .epilogue import Epilogue
from .errors import SpecError

LAYOUTS = ("nn", "nt", "tn", "tt")
DTYPES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}  # input element bytes (tf32 is stored as fp32)
FP8_DTYPES = {"e4m3": 1, "e5m2": 1}  # fp8 inputs (GemmSpec.scaling says how they are scaled)
INPUT_DTYPES = {**DTYPES, **FP8_DTYPES}  # every type A and B may have
SCALINGS = ("tensor", "rowwise", "block")  # fp8 only; gemmtune.fp8 defines each
FP8_OUT_DTYPES = ("bf16", "fp16", "fp32")  # D of an fp8 GEMM (fp32: the grouped kernel stores it from registers)
FP8_OPERANDS = {"scale_a": "fp32", "scale_b": "fp32", "offs": "int32"}  # what an fp8 kernel takes beyond A, B, D
FP8_LAYOUT = "nt"  # fp8 wgmma reads K-major A and B only: A M×K, B stored N×K
OUT_DTYPES = {"fp32": 4, "fp16": 2, "bf16": 2}  # storage types D (and C, bias) may have
MATHS = ("auto", "simt", "3xtf32", "tf32")  # how fp32 inputs are multiplied (GemmSpec.math)
MAX_DIM = 1 << 24
GATE_ROWS = 8  # gated GEMMs: B's rows alternate 8 gate rows, 8 up rows (interleave_gate_up)
GATED_DTYPES = ("bf16", "fp16")
GATED_LAYOUT = "nt"
MAX_ELEMENTS = (1 << 31) - 1  # generated kernels index each matrix with 32-bit offsets


def _dim(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise SpecError(f"{name} must be a positive integer, got {value!r}")
    try:
        as_int = int(str(value), 10) if not isinstance(value, int) else value
    except ValueError:
        raise SpecError(f"{name} must be a positive integer, got {value!r}") from None
    if as_int < 1:
        raise SpecError(f"{name} must be at least 1, got {as_int}")
    if as_int > MAX_DIM:
        raise SpecError(f"{name}={as_int} is larger than the supported {MAX_DIM}")
    return as_int


@dataclass(frozen=True, order=True)
class GemmSpec:
    m: int
    n: int
    k: int
    layout: str = "nn"
    dtype: str = "fp32"
    epilogue: Epilogue = field(default_factory=Epilogue)
    out_dtype: str | None = None  # None: default_out_dtype(dtype)
    math: str = "auto"  # fp32 only: auto, simt, 3xtf32 (tf32 becomes the tf32 dtype)
    scaling: str = "none"  # fp8 only: tensor, rowwise or block
    gated: bool = False  # D = silu(A·Wgᵀ)·(A·Wuᵀ), B (2N)×K interleaved by 8 rows (see the module doc)

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            object.__setattr__(self, name, _dim(name.upper(), getattr(self, name)))
        layout = str(self.layout).lower()
        if layout not in LAYOUTS:
            raise SpecError(f"unknown layout '{self.layout}'; choose one of {', '.join(LAYOUTS)}")
        object.__setattr__(self, "layout", layout)
        dtype = str(self.dtype).lower()
        if dtype not in INPUT_DTYPES:
            raise SpecError(f"unknown dtype '{self.dtype}'; supported: {', '.join(INPUT_DTYPES)}")
        dtype, math = _math(dtype, self.math)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "math", math)
        object.__setattr__(self, "scaling", _scaling(dtype, self.scaling))
        if dtype in FP8_DTYPES and layout != FP8_LAYOUT:
            raise SpecError(f"{dtype} takes layout {FP8_LAYOUT} only (fp8 wgmma reads K-major A and B: A M×K, "
                            f"B stored N×K), not {layout}")
        object.__setattr__(self, "out_dtype", _out_dtype(dtype, self.out_dtype))
        if not isinstance(self.epilogue, Epilogue):
            object.__setattr__(self, "epilogue", Epilogue.parse(self.epilogue))
        object.__setattr__(self, "gated", _gated(self, self.gated))
        for what, count in (("A", self.m * self.k), ("B", self.k * self.gemm_n), ("D", self.m * self.n)):
            if count > MAX_ELEMENTS:
                raise SpecError(f"{what} would hold {count} elements; at most {MAX_ELEMENTS} are supported")

    # --- shapes and counts -------------------------------------------------------------------
    @property
    def a_trans(self) -> bool:
        return self.layout[0] == "t"

    @property
    def b_trans(self) -> bool:
        return self.layout[1] == "t"

    @property
    def a_shape(self) -> tuple[int, int]:
        """Shape of A as stored in memory."""
        return (self.k, self.m) if self.a_trans else (self.m, self.k)

    @property
    def gemm_n(self) -> int:
        """Columns of the product the tensor cores form: 2N for a gated GEMM (gate and up), else N."""
        return 2 * self.n if self.gated else self.n

    @property
    def b_shape(self) -> tuple[int, int]:
        n = self.gemm_n
        return (n, self.k) if self.b_trans else (self.k, n)

    @property
    def fp8(self) -> bool:
        """Whether A and B are fp8 (e4m3 or e5m2) with scales."""
        return self.dtype in FP8_DTYPES

    @property
    def element_bytes(self) -> int:
        """Bytes of one element of A or B."""
        return INPUT_DTYPES[self.dtype]

    @property
    def out_element_bytes(self) -> int:
        """Bytes of one element of D (and of C and bias)."""
        return OUT_DTYPES[self.out_dtype]

    def storage_dtype(self, operand: str) -> str:
        """How operand `operand` (A, B, C, bias, D) is stored: fp32, fp16 or bf16 (tf32 data is fp32); fp8
        specs: A and B as e4m3 / e5m2 codes, their scales (scale_a, scale_b) fp32, and the row count the fp8
        kernel reads (offs: it is the grouped kernel with one group) int32."""
        if operand in ("A", "B"):
            return "fp32" if self.dtype == "tf32" else self.dtype
        if self.fp8 and operand in FP8_OPERANDS:
            return FP8_OPERANDS[operand]
        return self.out_dtype

    @property
    def default_out(self) -> bool:
        """Whether D has the dtype's default type (then out_dtype is left out of names and JSON)."""
        return self.out_dtype == default_out_dtype(self.dtype)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.gemm_n * self.k

    def operand_elements(self) -> int:
        return self.input_elements() + self.output_elements()

    def input_elements(self) -> int:
        """Elements of A and B."""
        return self.m * self.k + self.k * self.gemm_n

    def output_elements(self) -> int:
        """Elements of D and of the epilogue's C and bias (stored in out_dtype)."""
        extra = sum(_elements(op.shape(self.m, self.n)) for op in self.epilogue.operands())
        return self.m * self.n + extra

    @property
    def min_bytes(self) -> int:
        """Each input read once, D written once: A and B in dtype, D/C/bias in out_dtype."""
        return self.input_elements() * self.element_bytes + self.output_elements() * self.out_element_bytes

    def check_fits(self, free_bytes: int) -> None:
        """Raise SpecError if the operands cannot live in `free_bytes` of device memory."""
        need = self.min_bytes
        if need > free_bytes:
            raise SpecError(
                f"{self.short()} needs {need / 2**30:.1f} GiB of buffers; the GPU has {free_bytes / 2**30:.1f} GiB free"
            )

    # --- naming and serialization ---------------------------------------------------------------
    def short(self) -> str:
        epi = "" if self.epilogue.is_identity else f" {self.epilogue}"
        out = "" if self.default_out else f"->{self.out_dtype}"
        math = "" if self.math == "auto" else f"/{self.math}"
        scaling = f"/{self.scaling}" if self.fp8 else ""
        gated = " gated" if self.gated else ""
        return f"{self.m}x{self.n}x{self.k} {self.layout} {self.dtype}{math}{scaling}{out}{epi}{gated}"

    def slug(self) -> str:
        """A file- and C-identifier-safe name."""
        epi = "" if self.epilogue.is_identity else "_" + str(self.epilogue).replace("+", "_")
        out = "" if self.default_out else f"_out{self.out_dtype}"
        math = "" if self.math == "auto" else f"_{self.math}"
        scaling = f"_{self.scaling}" if self.fp8 else ""
        gated = "_gated" if self.gated else ""
        return f"gemm_{self.dtype}{math}{scaling}{out}_{self.layout}_{self.m}x{self.n}x{self.k}{epi}{gated}"

    def to_json(self) -> dict:
        """The spec's identity. out_dtype appears only when it is not the dtype's default, so specs
        written before it existed keep their JSON and key (tuning databases are keyed on them)."""
        data = {"m": self.m, "n": self.n, "k": self.k, "layout": self.layout, "dtype": self.dtype,
                "epilogue": str(self.epilogue)}
        if not self.default_out:
            data["out_dtype"] = self.out_dtype
        if self.math != "auto":  # likewise: fp32 specs from before the math option keep their key
            data["math"] = self.math
        if self.fp8:  # and non-fp8 specs keep the key they had before fp8
            data["scaling"] = self.scaling
        if self.gated:  # and plain specs the key they had before gated GEMMs
            data["gated"] = True
        return data

    @staticmethod
    def from_json(data: dict) -> "GemmSpec":
        return GemmSpec(data["m"], data["n"], data["k"], data.get("layout", "nn"), data.get("dtype", "fp32"),
                        Epilogue.parse(data.get("epilogue")), data.get("out_dtype"), data.get("math", "auto"),
                        data.get("scaling", "none"), bool(data.get("gated", False)))

    def without_epilogue(self) -> "GemmSpec":
        """The same GEMM with no epilogue (types and gating kept)."""
        return GemmSpec(self.m, self.n, self.k, self.layout, self.dtype, Epilogue(), self.out_dtype, self.math,
                        self.scaling, self.gated)

    def ungated(self) -> "GemmSpec":
        """The plain GEMM the tensor cores run for a gated spec: N' = 2N columns, D the gate and up
        products side by side (interleaved by 8); the spec itself when it is not gated."""
        if not self.gated:
            return self
        return GemmSpec(self.m, self.gemm_n, self.k, self.layout, self.dtype, self.epilogue, self.out_dtype,
                        self.math, self.scaling)

    def key(self) -> str:
        return stable_hash(self.to_json())


def refuse_fp8(spec: GemmSpec, stage: str) -> None:
    """SpecError (one line) where `stage` does not take fp8 specs yet."""
    if spec.fp8:
        raise SpecError(f"{stage} does not support fp8 GEMMs yet ({spec.short()}); show, bench and "
                        "gemmtune.build with evaluate do, and gemmtune.torch.scaled_mm runs them from torch")


def _gated(spec: GemmSpec, requested: object) -> bool:
    """The checked gated flag: gated GEMMs are 16-bit, layout nt, N a multiple of 8, no epilogue yet."""
    if isinstance(requested, str):
        requested = requested.strip().lower() in ("1", "true", "yes", "on")
    if not requested:
        return False
    if spec.n % GATE_ROWS:
        raise SpecError(f"gated GEMMs need N a multiple of 8 (gate and up rows interleave by 8), not N={spec.n}")
    if spec.dtype not in GATED_DTYPES:
        raise SpecError(f"gated GEMMs take {' or '.join(GATED_DTYPES)} inputs, not {spec.dtype}")
    if spec.layout != GATED_LAYOUT:
        raise SpecError(f"gated GEMMs take layout {GATED_LAYOUT} only (A M×K, the weight (2N)×K like nn.Linear), "
                        f"not {spec.layout}")
    if not spec.epilogue.is_identity:
        raise SpecError(f"gated GEMMs take no epilogue yet (SwiGLU is their epilogue), not {spec.epilogue}")
    return True


def default_out_dtype(dtype: str) -> str:
    """D's type unless asked otherwise: 16-bit inputs give 16-bit D, fp8 bf16, fp32 and tf32 fp32."""
    if dtype in FP8_DTYPES:
        return "bf16"
    return dtype if dtype in ("fp16", "bf16") else "fp32"


def _math(dtype: str, requested: object) -> tuple[str, str]:
    """(dtype, math) checked: math applies to fp32 inputs; fp32 with math tf32 is the tf32 dtype."""
    math = str(requested or "auto").lower()
    if math not in MATHS:
        raise SpecError(f"unknown math '{requested}'; choose one of {', '.join(MATHS)}")
    if dtype == "fp32" and math == "tf32":
        return "tf32", "auto"
    if dtype != "fp32" and math != "auto":
        raise SpecError(f"math {math} applies to fp32 inputs, not {dtype} (leave it out or use auto)")
    return dtype, math


def _out_dtype(dtype: str, requested: str | None) -> str:
    """The checked out_dtype for inputs of `dtype` (None: the default)."""
    default = default_out_dtype(dtype)
    if requested is None:
        return default
    out = str(requested).lower()
    if out not in OUT_DTYPES:
        raise SpecError(f"unknown out dtype '{requested}'; supported: {', '.join(OUT_DTYPES)}")
    allowed = list(FP8_OUT_DTYPES) if dtype in FP8_DTYPES else sorted({default, "fp32"})
    if out not in allowed:
        raise SpecError(f"out dtype {out} is not allowed with {dtype} inputs; choose {' or '.join(allowed)}")
    return out


def _scaling(dtype: str, requested: object) -> str:
    """The checked scaling: one of SCALINGS for fp8 inputs (required), "none" for every other dtype."""
    scaling = str(requested or "none").lower()
    if dtype not in FP8_DTYPES:
        if scaling != "none":
            raise SpecError(f"scaling {scaling} is for fp8 inputs ({', '.join(FP8_DTYPES)}), not {dtype}")
        return scaling
    if scaling not in SCALINGS:
        what = "needs a scaling" if scaling == "none" else f"scaling '{requested}' is unknown"
        raise SpecError(f"{dtype} {what}: choose {', '.join(SCALINGS)}")
    return scaling


def _elements(shape: tuple[int, ...]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def stable_hash(data: dict) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_SIZE_WORD = re.compile(r"^([A-Za-z]+)=(.*)$")


def parse_size_words(words: list[str]) -> dict[str, str]:
    """Turn ``M=1024 N=2048 K=3072`` / ``MN=1024 K=2048`` / ``MNK=4096`` into {'m','n','k'} strings."""
    sizes: dict[str, str] = {}
    for word in words:
        match = _SIZE_WORD.match(word.strip())
        letters = match.group(1).lower() if match else ""
        if not match or not letters or set(letters) - set("mnk") or len(set(letters)) != len(letters):
            raise SpecError(f"cannot read '{word}': write sizes as M=.. N=.. K=.., MN=.. or MNK=..")
        for letter in letters:
            if letter in sizes:
                raise SpecError(f"{letter.upper()} is given twice (in '{word}')")
            sizes[letter] = match.group(2)
    return sizes


def spec_from_words(words: list[str], layout: str | None = "nn", dtype: str = "fp32", epilogue: str | None = None,
                    m: str | None = None, n: str | None = None, k: str | None = None,
                    out_dtype: str | None = None, math: str | None = None, scaling: str | None = None,
                    gated: bool = False) -> GemmSpec:
    """Build a spec from size words plus flag values (flags fill what the words leave out). `layout`
    None: nt for fp8 inputs (the only layout they take), else nn. A word ``gated=1`` (or ``gated=0``) sets
    `gated` (then layout None means nt, the only layout gated GEMMs take)."""
    gated_words = [w for w in words if w.strip().lower().startswith("gated=")]
    for word in gated_words:
        value = word.strip().split("=", 1)[1].lower()
        if value not in ("0", "1", "true", "false", "yes", "no"):
            raise SpecError(f"cannot read '{word}': write gated=1 or gated=0")
        gated = value in ("1", "true", "yes")
    sizes = parse_size_words([w for w in words if w not in gated_words])
    for letter, flag in (("m", m), ("n", n), ("k", k)):
        if flag is not None:
            if letter in sizes:
                raise SpecError(f"{letter.upper()} is given both as a word and as --{letter}")
            sizes[letter] = flag
    missing = [x.upper() for x in "mnk" if x not in sizes]
    if missing:
        raise SpecError(f"missing size {', '.join(missing)}: give e.g. M=1024 N=1024 K=1024 or MNK=1024")
    if layout is None:
        layout = FP8_LAYOUT if str(dtype).lower() in FP8_DTYPES else GATED_LAYOUT if gated else "nn"
    return GemmSpec(sizes["m"], sizes["n"], sizes["k"], layout, dtype, Epilogue.parse(epilogue), out_dtype,
                    math or "auto", scaling or "none", gated)
