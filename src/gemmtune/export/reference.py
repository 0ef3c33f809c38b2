"""The trusted reference kernel: one thread per output, products summed in double.

Used twice: inside an exported folder (``reference.cuh``, namespaced so it cannot clash with the
tuned kernel) to check the tuned kernel on the target GPU, and as a tiny stand-alone
:class:`KernelSource` (family ``reference``) that is correct for any spec.
"""
from __future__ import annotations

from ..epilogue import Operand
from ..kernel_source import KernelSource
from ..spec import GemmSpec

FAMILY = "reference"
VERSION = "1"
BLOCK = (16, 16, 1)  # threadIdx.x walks columns of D: coalesced B reads and D writes

_PARAM_DECL = {"C": "const float* C", "bias": "const float* bias", "alpha": "float alpha", "beta": "float beta"}


def operand_params(spec: GemmSpec) -> list[str]:
    """C parameter declarations of the epilogue operands, in kernel order."""
    return [_PARAM_DECL[op.name] for op in spec.epilogue.operands()]


def kernel_params(spec: GemmSpec) -> str:
    """The full parameter list ``A, B, [C], [bias], [alpha], [beta], D`` as C declarations."""
    return ", ".join(["const float* A", "const float* B", *operand_params(spec), "float* D"])


def argument_names(spec: GemmSpec) -> tuple[str, ...]:
    return ("A", "B", *(op.name for op in spec.epilogue.operands()), "D")


def _element_expressions(spec: GemmSpec) -> tuple[str, str]:
    """How A(row, p) and B(p, col) are read, as stored (row-major, maybe transposed)."""
    a = "A[(size_t)p * M + row]" if spec.a_trans else "A[(size_t)row * K + p]"
    b = "B[(size_t)col * K + p]" if spec.b_trans else "B[(size_t)p * N + col]"
    return a, b


def kernel_code(spec: GemmSpec, entry: str, linkage: str = "") -> str:
    """CUDA text of the reference kernel `entry` (``linkage`` e.g. 'extern "C" ')."""
    a, b = _element_expressions(spec)
    statements = "".join(f"    {s}\n" for s in spec.epilogue.cuda_statements("row", "col", "N"))
    return f"""{spec.epilogue.cuda_preamble()}
// Reference for {spec.short()}: one thread per element of D, products summed in double,
// then the epilogue ({spec.epilogue}) applied to the rounded float exactly as the tuned kernel does.
{linkage}__global__ void {entry}({kernel_params(spec)}) {{
    const int M = {spec.m}, N = {spec.n}, K = {spec.k};
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    double acc = 0.0;
    for (int p = 0; p < K; ++p) acc += (double){a} * (double){b};
    float v = (float)acc;
{statements}    D[(size_t)row * N + col] = v;
}}
"""


def grid(spec: GemmSpec) -> tuple[int, int, int]:
    return (-(-spec.n // BLOCK[0]), -(-spec.m // BLOCK[1]), 1)


def reference_source(spec: GemmSpec) -> KernelSource:
    """The reference as a KernelSource: slow but correct for every spec (tests, fallbacks)."""
    entry = f"{spec.slug()}_reference"
    return KernelSource(code=kernel_code(spec, entry, 'extern "C" '), entry=entry, grid=grid(spec), block=BLOCK,
                        args=argument_names(spec), spec=spec, family=FAMILY, family_version=VERSION)


def reference_header(spec: GemmSpec) -> str:
    """``reference.cuh`` for an exported folder: the kernel plus a launcher in namespace gemmtune_reference."""
    call = ", ".join(argument_names(spec))
    return f"""// Reference GEMM used by main.cu to check the tuned kernel. Written by gemmtune; slow on purpose.
#pragma once
#include <cuda_runtime.h>

namespace gemmtune_reference {{
{kernel_code(spec, "gemm")}
// Launch the reference on `stream`; returns the launch error, if any.
inline cudaError_t launch({kernel_params(spec)}, cudaStream_t stream) {{
    const dim3 grid({grid(spec)[0]}, {grid(spec)[1]}), block({BLOCK[0]}, {BLOCK[1]});
    gemm<<<grid, block, 0, stream>>>({call});
    return cudaGetLastError();
}}
}}  // namespace gemmtune_reference
"""


def is_pointer(operand: Operand) -> bool:
    return operand.kind != "scalar"
