"""The accuracy report: each fp32 method's error against a float64 reference, beside cuBLAS SGEMM's.

    gemmtune bench M=512 N=512 K=16384 --accuracy

For one shape it draws inputs of several classes (INPUT_CLASSES: plain uniform values, rows and
columns scaled by 1e4 and 1e-4, values near fp32's largest and smallest normal numbers, a few such
values among ordinary ones), runs every fp32 method gemmtune has for the GPU (simt, 3xtf32, tf32)
and cuBLAS in fp32 (tf32 off) on the same inputs, and compares each D with A·B computed in float64.
Two errors per run:

    relative    ‖D − D64‖_F / ‖D64‖_F          how far D is overall
    worst       max |D − D64| / (|A|·|B|)       per element, against the size of the terms summed
                                                (meaningful when rows differ by 10^8 in scale)

`ratio` is a method's worst error over cuBLAS SGEMM's on the same inputs. Needs torch and a GPU.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .spec import GemmSpec

# A class draws (A, B) as float32 torch tensors in the spec's stored shapes from a torch Generator.
Draw = Callable[[Any, GemmSpec, Any], tuple[Any, Any]]


@dataclass(frozen=True)
class InputClass:
    name: str
    what: str
    draw: Draw


def _uniform(torch: Any, shape: tuple[int, int], gen: Any) -> Any:
    return torch.rand(shape, generator=gen, device="cuda", dtype=torch.float64).mul_(2).sub_(1)


def _as_used(spec: GemmSpec, a: Any, b: Any) -> tuple[Any, Any]:
    """(A as M×K, B as K×N) views of the stored operands; applied to the used ones, the stored views."""
    return (a.t() if spec.a_trans else a), (b.t() if spec.b_trans else b)


def _stored(spec: GemmSpec, a_used: Any, b_used: Any) -> tuple[Any, Any]:
    """The operands as the kernel reads them: stored layout, contiguous, fp32."""
    a, b = _as_used(spec, a_used, b_used)  # a transpose undoes itself
    return a.contiguous().float(), b.contiguous().float()


def _cycle(torch: Any, values: tuple[float, ...], length: int) -> Any:
    """`values` repeated to `length` entries (float64, on the GPU)."""
    return torch.tensor(values, device="cuda", dtype=torch.float64).repeat(length // len(values) + 1)[:length]


def _scaled(pattern: str) -> Draw:
    """Uniform values, then A's rows and B's columns (pattern 'rows': scales D's rows and columns) or
    A's columns and B's rows (pattern 'k': terms of one sum differ by up to 10^8) multiplied by 1e4, 1,
    1e-4 in turn."""
    def draw(torch: Any, spec: GemmSpec, gen: Any) -> tuple[Any, Any]:
        a = _uniform(torch, (spec.m, spec.k), gen)
        b = _uniform(torch, (spec.k, spec.n), gen)
        if pattern == "rows":
            a = a * _cycle(torch, (1e4, 1.0, 1e-4), spec.m)[:, None]
            b = b * _cycle(torch, (1e-4, 1.0, 1e4), spec.n)[None, :]
        else:
            scale = _cycle(torch, (1e4, 1.0, 1e-4), spec.k)
            a, b = a * scale[None, :], b * scale[:, None]
        return _stored(spec, a, b)
    return draw


def _power_scaled(exp_a: int, exp_b: int) -> Draw:
    """Uniform values times 2^exp_a (A) and 2^exp_b (B): near fp32's range limits without overflow."""
    def draw(torch: Any, spec: GemmSpec, gen: Any) -> tuple[Any, Any]:
        a = _uniform(torch, (spec.m, spec.k), gen) * 2.0 ** exp_a
        b = _uniform(torch, (spec.k, spec.n), gen) * 2.0 ** exp_b
        return _stored(spec, a, b)
    return draw


def _scattered(target: str) -> Draw:
    """Uniform values, with every 97th K index (target 'k': A's column ·2^124, B's row ·2^-124,
    products near 1) or every 89th row of A (target 'rows': ·2^-120) scaled: a few values too small
    for a tf32 split among ordinary ones, in some k-blocks and some tiles only."""
    def draw(torch: Any, spec: GemmSpec, gen: Any) -> tuple[Any, Any]:
        a = _uniform(torch, (spec.m, spec.k), gen)
        b = _uniform(torch, (spec.k, spec.n), gen)
        if target == "k":
            a[:, 5::97] *= 2.0 ** 124
            b[5::97, :] *= 2.0 ** -124
        else:
            a[3::89, :] *= 2.0 ** -120
        return _stored(spec, a, b)
    return draw


INPUT_CLASSES: tuple[InputClass, ...] = (
    InputClass("uniform", "U(-1, 1)", _power_scaled(0, 0)),
    InputClass("rows 1e±4", "rows of A and columns of B scaled by 1e4, 1, 1e-4", _scaled("rows")),
    InputClass("k 1e±4", "columns of A and rows of B scaled by 1e4, 1, 1e-4 (terms of a sum 1e8 apart)", _scaled("k")),
    InputClass("large", "A·2^56, B·2^56: products near 2^112, sums near fp32's largest", _power_scaled(56, 56)),
    InputClass("huge×tiny", "A·2^120 (near fp32's largest), B·2^-124 (near its smallest normal)",
               _power_scaled(120, -124)),
    InputClass("tiny", "A·2^-60, B·2^-60: products near fp32's smallest normal (2^-126)", _power_scaled(-60, -60)),
    InputClass("k huge×tiny", "every 97th K index: A's column ·2^124, B's row ·2^-124 (products near 1)",
               _scattered("k")),
    InputClass("rows tiny", "every 89th row of A ·2^-120", _scattered("rows")),
)
# The classes holding values too small for a tf32 split (0 < |x| < 2^-103): a split without an exact
# path for them (the mma family's) loses 2^-11 of their products.
TOO_SMALL_TO_SPLIT = ("huge×tiny", "k huge×tiny", "rows tiny")


@dataclass(frozen=True)
class ErrorRow:
    input_class: str
    method: str  # "cuBLAS SGEMM", "cuBLAS tf32", or a gemmtune kernel's "family math"
    relative: float
    worst: float
    ratio: float | None  # worst / cuBLAS SGEMM's worst on the same inputs

    def to_json(self) -> dict:
        return {"input_class": self.input_class, "method": self.method, "relative": self.relative,
                "worst": self.worst, "ratio": self.ratio}


@dataclass(frozen=True)
class Reference:
    """What every method's D on one set of inputs is compared with: A·B in float64, |A|·|B| (the
    size of the terms each element sums) and ‖A·B‖_F."""

    product: Any
    term_scale: Any
    norm: float

    @staticmethod
    def of(torch: Any, spec: GemmSpec, a: Any, b: Any) -> "Reference":
        a64, b64 = _as_used(spec, a.double(), b.double())
        product = a64 @ b64
        return Reference(product, a64.abs() @ b64.abs(), torch.linalg.norm(product).item())

    def errors(self, torch: Any, d: Any) -> tuple[float, float]:
        """(relative Frobenius error, worst per-element error over (|A|·|B|)) of D."""
        diff = (d.double() - self.product).abs()
        relative = torch.linalg.norm(diff).item() / self.norm if self.norm > 0 else float("nan")
        worst = (diff / self.term_scale.clamp_min(torch.finfo(torch.float64).tiny)).max().item()
        return relative, worst


def cublas_fp32(torch: Any, spec: GemmSpec, a: Any, b: Any, tf32: bool) -> Any:
    """D = A·B by torch.matmul in fp32, tf32 on or off."""
    from .baseline import _fp32_precision

    used_a, used_b = _as_used(spec, a, b)
    with _fp32_precision(torch, tf32=tf32):
        return used_a @ used_b


def run_report(spec: GemmSpec, kernels: list[tuple[str, Callable[[Any, Any], Any]]],
               classes: tuple[InputClass, ...] = INPUT_CLASSES, seed: int = 0) -> list[ErrorRow]:
    """ErrorRows for every class: cuBLAS SGEMM, cuBLAS tf32, then each (name, kernel(A, B) -> D)."""
    import torch

    plain = spec.without_epilogue()
    rows: list[ErrorRow] = []
    for cls in classes:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        a, b = cls.draw(torch, plain, gen)
        ref = Reference.of(torch, plain, a, b)  # once per class: every method is compared with it
        baseline = ref.errors(torch, cublas_fp32(torch, plain, a, b, tf32=False))
        rows.append(ErrorRow(cls.name, "cuBLAS SGEMM", *baseline, 1.0))
        named = [("cuBLAS tf32", lambda x, y: cublas_fp32(torch, plain, x, y, tf32=True))] + kernels
        for name, kernel in named:
            rel, worst = ref.errors(torch, kernel(a, b))
            rows.append(ErrorRow(cls.name, name, rel, worst, worst / baseline[1] if baseline[1] > 0 else None))
    return rows


def format_report(spec: GemmSpec, rows: list[ErrorRow]) -> str:
    """A markdown table: class, method, both errors and the ratio to cuBLAS SGEMM."""
    lines = [f"Accuracy of {spec.without_epilogue().short()} against float64 (ratio: worst error / cuBLAS SGEMM's)",
             "", "| inputs | method | relative (Frobenius) | worst per element | × SGEMM |", "|---|---|---|---|---|"]
    for r in rows:
        ratio = "—" if r.ratio is None else f"{r.ratio:.2f}"
        lines.append(f"| {r.input_class} | {r.method} | {r.relative:.2e} | {r.worst:.2e} | {ratio} |")
    return "\n".join(lines)


def method_specs(spec: GemmSpec) -> list[GemmSpec]:
    """The specs whose kernels the report compares: for fp32, one per method (simt, 3xtf32, tf32)."""
    plain = spec.without_epilogue()
    if plain.dtype != "fp32":
        return [plain]
    return [GemmSpec(plain.m, plain.n, plain.k, plain.layout, "fp32", math=math) for math in ("simt", "3xtf32", "tf32")]


def method_kernels(spec: GemmSpec, arch: str, db_path: Any = None) -> tuple[list[tuple[str, Callable]], list[str]]:
    """([(name, kernel(A, B) -> D)], [one line per method this GPU cannot run]) for run_report."""
    from .build import build
    from .errors import GemmtuneError

    kernels, skipped = [], []
    for method in method_specs(spec):
        label = method.math if method.dtype == "fp32" else method.dtype
        try:
            kernel = build(method, arch=arch, db_path=db_path)
        except GemmtuneError as err:
            skipped.append(f"{label}: {err}")
            continue
        kernels.append((f"gemmtune {label} ({kernel.family})", kernel))
    return kernels, skipped
