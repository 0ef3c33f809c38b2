"""A grouped kernel compiled (NVRTC), loaded and launched through the project's runtime; kept per
(spec, config, GPU). No torch here: pointers in, one launch (torch/grouped_calls.py wraps it)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator

from ..compiler import compile_kernel
from ..device import query_device
from ..errors import LaunchError
from ..invoke import BoundLaunches, launch_on
from ..runtime import LoadedKernel
from .config import GroupedConfig
from .render import render
from .spec import GroupedSpec
from .tuned import chosen_config


@dataclass(frozen=True)
class GroupedKernel:
    spec: GroupedSpec
    config: GroupedConfig
    loaded: LoadedKernel
    ordinal: int
    bound: BoundLaunches = field(default_factory=BoundLaunches, compare=False)  # by (bindings, stream)

    def __call__(self, a: int, b: int, offs: int, d: int, bias: int | None = None, stream: int = 0, *,
                 scale_a: int | None = None, scale_b: int | None = None) -> None:
        """Enqueue D = epilogue(A·B per group) on `stream`: device pointers to A (total_m, K), the
        weights (G, N, K) (SwiGLU: (G, 2N, K)), offs (G,) int32 (masked layout: the counts), D (total_m, N)
        and bias (G, N) where the epilogue adds one; fp8: float32 scale_a (1 or total_m) and scale_b (1 or G·N)."""
        bindings = {"A": a, "B": b, "offs": offs, "D": d}
        if self.spec.has_bias:
            if not bias:
                raise LaunchError(f"{self.loaded.source.entry} adds a bias: pass bias (G, N)")
            bindings["bias"] = bias
        if self.spec.fp8:
            if not scale_a or not scale_b:
                raise LaunchError(f"{self.loaded.source.entry} scales fp8 operands: pass scale_a and scale_b")
            bindings["scale_a"], bindings["scale_b"] = scale_a, scale_b
        launch_bound(self.loaded, self.bound, bindings, stream, self.ordinal)


def launch_bound(loaded: LoadedKernel, bound: BoundLaunches, bindings: dict[str, int], stream: int,
                 ordinal: int) -> None:
    """Enqueue `loaded` with `bindings` on `stream` of GPU `ordinal`: the launch bound for them before, else
    bound now (argument packing, tensor maps) and kept in `bound`."""
    launch_on(bound.get((tuple(bindings.items()), stream), lambda: loaded.bind(bindings, stream)), ordinal)


class KernelCache:
    """Kernels built once per key (spec, config, GPU) and kept, under a lock (torch calls may come from
    several threads)."""

    def __init__(self) -> None:
        self._kernels: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        with self._lock:
            if key not in self._kernels:
                self._kernels[key] = make()
            return self._kernels[key]

    def __iter__(self) -> Iterator[Hashable]:
        """The keys kept so far."""
        with self._lock:
            return iter(list(self._kernels))


_kernels = KernelCache()


def build(spec: GroupedSpec, config: GroupedConfig | None = None, ordinal: int = 0) -> GroupedKernel:
    """The kernel for `spec` on GPU `ordinal` (a persistent grid of its SM count), built once and kept; `config`
    None: the tuned config of the spec (tuned.chosen_config: the tuning database, read once per spec and GPU), else
    the default."""
    config = config or chosen_config(spec, ordinal)

    def make() -> GroupedKernel:
        info = query_device(ordinal)
        if info.cc != (9, 0):
            raise LaunchError(f"grouped GEMM kernels use wgmma and TMA (sm_90a); GPU {ordinal} is {info.arch}")
        compiled = compile_kernel(render(spec, config, info.sm_count), "sm_90a")
        return GroupedKernel(spec, config, LoadedKernel(compiled, ordinal), ordinal)

    return _kernels.get((spec, config, ordinal), make)
