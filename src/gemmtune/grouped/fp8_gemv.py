"""The fp8 decode GEMV (kernels/gemv/fp8_rows.py) compiled (NVRTC), loaded and launched through the project's
runtime; kept per (spec, config, GPU). No torch here: pointers in, one launch (scaled_ops.py routes
gemmtune::scaled_mm's M ≤ 16 calls with per-tensor or rowwise scales to it)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..compiler import compile_kernel
from ..device import query_device
from ..errors import LaunchError
from ..invoke import BoundLaunches
from ..kernels.gemv.fp8_config import MAX_ROWS, MIN_ARCH, PIECE, SCALINGS, Fp8GemvConfig, Fp8GemvSpec, default_config
from ..kernels.gemv.fp8_rows import render
from ..runtime import LoadedKernel
from .launch import KernelCache, launch_bound


@dataclass(frozen=True)
class Fp8GemvKernel:
    spec: Fp8GemvSpec
    config: Fp8GemvConfig
    loaded: LoadedKernel
    ordinal: int
    bound: BoundLaunches = field(default_factory=BoundLaunches, compare=False)  # by (bindings, stream)

    def __call__(self, a: int, w: int, scale_a: int, scale_b: int, d: int, bias: int | None = None,
                 stream: int = 0) -> None:
        """Enqueue D = scale · A·Wᵀ (+ bias) on `stream`: device pointers to A (M, K) and W (N, K) fp8 codes (16-byte
        aligned), float32 scale_a (1 or M) and scale_b (1 or N), D (M, N) and bias (N,) of D's type."""
        bindings = {"A": a, "B": w, "scale_a": scale_a, "scale_b": scale_b, "D": d}
        if self.spec.bias:
            if not bias:
                raise LaunchError(f"{self.loaded.source.entry} adds a bias: pass bias (N,)")
            bindings["bias"] = bias
        launch_bound(self.loaded, self.bound, bindings, stream, self.ordinal)


_kernels = KernelCache()


def build(spec: Fp8GemvSpec, config: Fp8GemvConfig | None = None, ordinal: int = 0) -> Fp8GemvKernel:
    """The kernel for `spec` on GPU `ordinal` (default_config for its SM count unless `config`), built once and kept."""
    info = query_device(ordinal)
    if info.cc[0] * 10 + info.cc[1] < MIN_ARCH:
        raise LaunchError(f"the fp8 GEMV converts with cvt .e4m3x2 / .e5m2x2 (sm_89+); GPU {ordinal} is {info.arch}")
    config = config or default_config(spec, info.sm_count)

    def make() -> Fp8GemvKernel:
        compiled = compile_kernel(render(spec, config, info.arch), info.arch)
        return Fp8GemvKernel(spec, config, LoadedKernel(compiled, ordinal), ordinal)

    return _kernels.get((spec, config, ordinal), make)


def decode_spec(m: int, n: int, k: int, fmt: str, scaling: str, out_dtype: str, bias: bool) -> Fp8GemvSpec | None:
    """The fp8 GEMV's spec for a scaled_mm call it takes (M ≤ 16, per-tensor or rowwise scales, K a multiple of
    16), else None (the grouped wgmma kernel runs it)."""
    if m > MAX_ROWS or scaling not in SCALINGS or k % PIECE:
        return None
    return Fp8GemvSpec(m, n, k, fmt, scaling, out_dtype, bias)
