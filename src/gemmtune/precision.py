"""How fp32 GEMMs are multiplied: the `math` of a GemmSpec and what `auto` picks.

fp32 inputs can be multiplied three ways:

    simt    fp32 products on CUDA cores (cuBLAS SGEMM's method): fp32 accuracy, ~51 TFLOP/s on an H100.
    3xtf32  each operand x = big + small, both tf32 (big = x rounded to tf32, small = the rounded
            residual); the tensor cores sum big·big + big·small + small·big in fp32 (small·small,
            under 2^-22 of the product, is dropped): fp32 accuracy at tensor-core speed, 3 products.
    tf32    one tf32 product: fastest, ~10 bits of mantissa (the tf32 dtype).

`auto` (the default) keeps fp32 accuracy and picks the faster method where both were measured on the
GPU. Today that is simt everywhere: on an H100 (2026-11-25, bench/results/2026-11-25-h100-3xtf32.md)
3xtf32 on mma.sync ran 0.33-0.74x cuBLAS SGEMM against simt's 0.83-1.22x (mma.sync's tf32 rate is
312 TFLOP/s, a third of it is 104, and the split costs as many instructions as the mma work), and
on inputs near fp32's smallest normal number its error was far above SGEMM's (the split's small
part underflows). 3xtf32 stays available as math="3xtf32"; a GPU where it measures faster (sm_80-89,
whose CUDA cores are slower next to their tensor cores) goes into FASTER_3XTF32 with its bounds.
"""
from __future__ import annotations

from .kernels.config_base import arch_number
from .spec import GemmSpec

# arch number -> smallest M·N·K at which 3xtf32 measured faster than simt there, at fp32 accuracy on
# the accuracy report's inputs. Empty: no GPU measured so yet (see the module docstring).
FASTER_3XTF32: dict[int, int] = {}
AUTO_RULE_NOTE = ("auto keeps fp32 on CUDA cores (simt) on this GPU: 3xtf32 measured slower than simt on an "
                  "H100 and is not measured elsewhere")


def auto_math(spec: GemmSpec, arch: str) -> str:
    """The method `auto` uses for fp32 `spec` on `arch`: "3xtf32" or "simt"."""
    if spec.dtype != "fp32":
        raise ValueError(f"math applies to fp32 specs, not {spec.dtype}")
    least = FASTER_3XTF32.get(arch_number(arch))
    return "3xtf32" if least is not None and spec.m * spec.n * spec.k >= least else "simt"

