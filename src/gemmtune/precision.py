"""How fp32 GEMMs are multiplied: the `math` of a GemmSpec and what `auto` picks.

fp32 inputs can be multiplied three ways:

    simt    fp32 products on CUDA cores (cuBLAS SGEMM's method): fp32 accuracy, ~51 TFLOP/s on an H100.
    3xtf32  each operand x = big + small, both tf32 (big = x rounded to tf32, small = the rounded
            residual); the tensor cores sum big·big + big·small + small·big in fp32 (small·small,
            under 2^-22 of the product, is dropped): fp32 accuracy at tensor-core speed, 3 products.
    tf32    one tf32 product: fastest, ~10 bits of mantissa (the tf32 dtype).

`auto` (the default) keeps fp32 accuracy and picks the faster method where both were measured on the
GPU. On sm_90 that is 3xtf32 on the wgmma family (any layout; rows of A and B that TMA cannot read
in place are first copied into aligned ones, docs/staging.md) from M·N·K = 2^29 up: on an H100 (2026-11-26, `git show a5c16f7:bench/results/2026-11-26-h100-3xtf32-wgmma.md` and
`git show a5c16f7:bench/results/2026-11-26-h100-transposed-wgmma.md`) it ran 1.3-2.1x cuBLAS SGEMM from 1000^3 up in layout nt and
1.3-1.9x in nn and tn (0.78-0.93x at 96x96x65536, where simt ran 0.33-0.41x) against simt's
0.72-0.92x, and simt won at 256^3 and 512^3 in both layouts; since 74f3e4c 4096^3 nt runs 2.02x
on an H200 and 1.99x on an H100 (2026-11-26-3xtf32-split-loads-and-order.md). Its worst error is
0.26-1.16x SGEMM's on every class of the accuracy report in all four layouts, values below 2^-103
included: their tf32 residual would fall below fp32's normal range, so the kernel finds them while
it splits and sums the tiles that hold them again on CUDA cores (kernels.wgmma.render.exact_piece;
`git show a5c16f7:bench/results/2026-11-26-h100-3xtf32-exact-path.md`: a tile summed again runs about 10x slower than SGEMM). With
such copies the evaluation set's five unaligned fp32 shapes ran 0.94-1.73x SGEMM (H100, 2026-11-26),
where simt ran 0.58-0.73x. Every other arch is unmeasured: simt there (mma.sync's 3xtf32 ran
0.33-0.74x SGEMM on an H100, 2026-11-25, and its split has no exact path).
"""
from __future__ import annotations

from .kernels.config_base import arch_number
from .spec import GemmSpec

# arch number -> smallest M·N·K at which 3xtf32 measured faster than simt there, for the specs the
# arch's fast 3xtf32 family takes (on sm_90: wgmma, any rows).
FASTER_3XTF32: dict[int, int] = {90: 1 << 29}
AUTO_RULE_NOTE = ("auto runs fp32 as 3xtf32 only on sm_90 with M·N·K >= 2^29, where it measured faster "
                  "than simt; elsewhere it keeps simt")


def auto_math(spec: GemmSpec, arch: str) -> str:
    """The method `auto` uses for fp32 `spec` on `arch`: "3xtf32" or "simt"."""
    if spec.dtype != "fp32":
        raise ValueError(f"math applies to fp32 specs, not {spec.dtype}")
    number = arch_number(arch)
    least = FASTER_3XTF32.get(number)
    if least is None or spec.m * spec.n * spec.k < least:
        return "simt"
    # On sm_90 the wgmma family runs it; rows of A and B that TMA cannot read in place are staged
    # first (docs/staging.md): the eval set's five unaligned fp32 shapes, on simt 0.58-0.73x cuBLAS
    # SGEMM before, measured as docs/staging.md says.
    return "3xtf32"


def math_refusal(spec: GemmSpec, arch: str, family: str) -> str | None:
    """Why tensor-core `family` does not run fp32 `spec` as 3xtf32 on `arch` (None: it does): it
    runs 3xtf32 when asked for, or when auto picks it for the shape."""
    if spec.math == "simt":
        return f"math simt runs fp32 on CUDA cores (the simt family); {family} runs fp32 as 3xtf32"
    if spec.math == "auto" and auto_math(spec, arch) != "3xtf32":
        return f"{AUTO_RULE_NOTE}; ask for it with math 3xtf32"
    return None
