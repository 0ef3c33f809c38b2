"""TensorIR workloads written in TVMScript: the computations, before any schedule.

    gemm(spec)      D = op(A)·op(B)          (layouts nn, nt, tn, tt; block "gemm")
                    D = ReLU(op(A)·op(B)) + C (epilogue relu+add; blocks "gemm", "epilogue")
    vector_add(n)   C = A + B
    window_sum(n,w) B[i] = A[i] + ... + A[i+w-1]

Shapes are baked in (static), because the kernels gemmtune launches have a fixed grid. Each
function is named "main" with the "tirx.noalias" attribute (TVM 0.27's key; the old "tir.noalias"
is ignored), so the generated CUDA marks every pointer __restrict__.

The layout only changes how A and B are indexed: `_a_at`/`_b_at` return the index tuple of the
element op(A)[i, k] / op(B)[k, j] as stored, and the parser evaluates them while reading the
script, so the printed TVMScript shows plain `A[vk, vi]`-style accesses.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from ..spec import GemmSpec

# Epilogues the TVM backend can express: the TVMScript signature is fixed per workload.
SUPPORTED_EPILOGUES = ("none", "relu+add")

Index = Callable[[Any, Any], tuple[Any, Any]]


def _a_at(a_trans: bool) -> Index:
    return (lambda i, k: (k, i)) if a_trans else (lambda i, k: (i, k))


def _b_at(b_trans: bool) -> Index:
    return (lambda k, j: (j, k)) if b_trans else (lambda k, j: (k, j))


def check_supported(spec: GemmSpec) -> None:
    """Raise ConfigError unless the TVM backend has a workload for this spec."""
    if str(spec.epilogue) not in SUPPORTED_EPILOGUES:
        raise ConfigError(f"the TVM backend implements the epilogues {', '.join(SUPPORTED_EPILOGUES)}, "
                          f"not '{spec.epilogue}'")
    if spec.dtype != "fp32":
        raise ConfigError(f"the TVM backend implements fp32, not {spec.dtype}")


def gemm(spec: GemmSpec) -> Any:
    """The PrimFunc for `spec`: plain GEMM or GEMM + ReLU + C."""
    check_supported(spec)
    build = gemm_plain if spec.epilogue.is_identity else gemm_relu_add
    return build(spec.m, spec.n, spec.k, spec.a_trans, spec.b_trans)


def gemm_plain(M: int, N: int, K: int, a_trans: bool = False, b_trans: bool = False) -> Any:
    """D[i, j] = sum_k op(A)[i, k] * op(B)[k, j]."""
    from tvm.script import tirx as T

    a_shape, b_shape = ((K, M) if a_trans else (M, K)), ((N, K) if b_trans else (K, N))
    a_at, b_at = _a_at(a_trans), _b_at(b_trans)

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer(a_shape, "float32"), B: T.Buffer(b_shape, "float32"), D: T.Buffer((M, N), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i, j, k in T.grid(M, N, K):
            with T.sblock("gemm"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    D[vi, vj] = T.float32(0)
                D[vi, vj] = D[vi, vj] + A[a_at(vi, vk)] * B[b_at(vk, vj)]

    return main


def gemm_relu_add(M: int, N: int, K: int, a_trans: bool = False, b_trans: bool = False) -> Any:
    """D[i, j] = max(sum_k op(A)[i, k] * op(B)[k, j], 0) + C[i, j], through an accumulator.

    The accumulator is a block-local buffer (`T.sblock_alloc_buffer`): with the plain
    `T.alloc_buffer`, `reverse_compute_inline` of the epilogue fails in TVM 0.27.
    """
    from tvm.script import tirx as T

    a_shape, b_shape = ((K, M) if a_trans else (M, K)), ((N, K) if b_trans else (K, N))
    a_at, b_at = _a_at(a_trans), _b_at(b_trans)

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer(a_shape, "float32"), B: T.Buffer(b_shape, "float32"), C: T.Buffer((M, N), "float32"),
             D: T.Buffer((M, N), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        acc = T.sblock_alloc_buffer((M, N), "float32")
        for i, j, k in T.grid(M, N, K):
            with T.sblock("gemm"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    acc[vi, vj] = T.float32(0)
                acc[vi, vj] = acc[vi, vj] + A[a_at(vi, vk)] * B[b_at(vk, vj)]
        for i, j in T.grid(M, N):
            with T.sblock("epilogue"):
                vi, vj = T.axis.remap("SS", [i, j])
                D[vi, vj] = T.max(acc[vi, vj], T.float32(0)) + C[vi, vj]

    return main


def vector_add(n: int) -> Any:
    """C = A + B over n floats."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32"), C: T.Buffer((n,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i in range(n):
            with T.sblock("add"):
                vi = T.axis.spatial(n, i)
                C[vi] = A[vi] + B[vi]

    return main


def window_sum(n: int, width: int) -> Any:
    """B[i] = A[i] + A[i+1] + ... + A[i+width-1] for the n-width+1 full windows of A."""
    from tvm.script import tirx as T

    if not 1 <= width <= n:
        raise ConfigError(f"a window of {width} does not fit in {n} elements")
    out = n - width + 1

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((out,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i, r in T.grid(out, width):
            with T.sblock("window"):
                vi, vr = T.axis.remap("SR", [i, r])
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi + vr]

    return main


def module(func: Any) -> Any:
    """Wrap a PrimFunc as the IRModule {"main": func} that schedules and builds work on."""
    import tvm

    return tvm.IRModule({"main": func})
