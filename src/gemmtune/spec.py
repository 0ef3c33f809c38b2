"""GemmSpec: what to compute. D[M×N] = epilogue(op(A)·op(B)), all matrices row-major in memory.

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
DTYPES = {"fp32": 4}  # element bytes; tf32/fp16/bf16 join here when a family supports them
FUTURE_DTYPES = ("tf32", "fp16", "bf16")
MAX_DIM = 1 << 24
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

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            object.__setattr__(self, name, _dim(name.upper(), getattr(self, name)))
        layout = str(self.layout).lower()
        if layout not in LAYOUTS:
            raise SpecError(f"unknown layout '{self.layout}'; choose one of {', '.join(LAYOUTS)}")
        object.__setattr__(self, "layout", layout)
        dtype = str(self.dtype).lower()
        if dtype in FUTURE_DTYPES:
            raise SpecError(f"dtype '{dtype}' is not supported yet; supported: {', '.join(DTYPES)}")
        if dtype not in DTYPES:
            raise SpecError(f"unknown dtype '{self.dtype}'; supported: {', '.join(DTYPES)}")
        object.__setattr__(self, "dtype", dtype)
        if not isinstance(self.epilogue, Epilogue):
            object.__setattr__(self, "epilogue", Epilogue.parse(self.epilogue))
        for what, count in (("A", self.m * self.k), ("B", self.k * self.n), ("D", self.m * self.n)):
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
    def b_shape(self) -> tuple[int, int]:
        return (self.n, self.k) if self.b_trans else (self.k, self.n)

    @property
    def element_bytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def operand_elements(self) -> int:
        extra = sum(_elements(op.shape(self.m, self.n)) for op in self.epilogue.operands())
        return self.m * self.k + self.k * self.n + self.m * self.n + extra

    @property
    def min_bytes(self) -> int:
        """Each input read once, D written once."""
        return self.operand_elements() * self.element_bytes

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
        return f"{self.m}x{self.n}x{self.k} {self.layout} {self.dtype}{epi}"

    def slug(self) -> str:
        """A file- and C-identifier-safe name."""
        epi = "" if self.epilogue.is_identity else "_" + str(self.epilogue).replace("+", "_")
        return f"gemm_{self.dtype}_{self.layout}_{self.m}x{self.n}x{self.k}{epi}"

    def to_json(self) -> dict:
        return {"m": self.m, "n": self.n, "k": self.k, "layout": self.layout, "dtype": self.dtype,
                "epilogue": str(self.epilogue)}

    @staticmethod
    def from_json(data: dict) -> "GemmSpec":
        return GemmSpec(data["m"], data["n"], data["k"], data.get("layout", "nn"), data.get("dtype", "fp32"),
                        Epilogue.parse(data.get("epilogue")))

    def key(self) -> str:
        return stable_hash(self.to_json())


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


def spec_from_words(words: list[str], layout: str = "nn", dtype: str = "fp32", epilogue: str | None = None,
                    m: str | None = None, n: str | None = None, k: str | None = None) -> GemmSpec:
    """Build a spec from size words plus flag values (flags fill what the words leave out)."""
    sizes = parse_size_words(words)
    for letter, flag in (("m", m), ("n", n), ("k", k)):
        if flag is not None:
            if letter in sizes:
                raise SpecError(f"{letter.upper()} is given both as a word and as --{letter}")
            sizes[letter] = flag
    missing = [x.upper() for x in "mnk" if x not in sizes]
    if missing:
        raise SpecError(f"missing size {', '.join(missing)}: give e.g. M=1024 N=1024 K=1024 or MNK=1024")
    return GemmSpec(sizes["m"], sizes["n"], sizes["k"], layout, dtype, Epilogue.parse(epilogue))
