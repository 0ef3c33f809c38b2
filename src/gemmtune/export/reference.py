"""The trusted reference kernel: one thread per output, products summed in double.

Used twice: inside an exported folder (``reference.cuh``, namespaced so it cannot clash with the
tuned kernel) to check the tuned kernel on the target GPU, and as a tiny stand-alone
:class:`KernelSource` (family ``reference``) that is correct for any spec.
"""
from __future__ import annotations

from ..epilogue import Operand
from ..kernel_source import KernelSource
from ..spec import GemmSpec
from .element_types import CONVERSIONS, c_type, uses_16_bit
from .gated import reference_sum

FAMILY = "reference"
VERSION = "1"
BLOCK = (16, 16, 1)  # threadIdx.x walks columns of D: coalesced B reads and D writes

def _param(spec: GemmSpec, name: str, suffix: str = "") -> str:
    if name in ("alpha", "beta"):
        return f"float {name}"
    const = "" if name == "D" else "const "
    return f"{const}{c_type(spec, name)}* {name}{suffix}"


def operand_params(spec: GemmSpec, suffix: str = "") -> list[str]:
    """C parameter declarations of the epilogue operands, in kernel order (pointers get `suffix`)."""
    return [_param(spec, op.name, suffix if is_pointer(op) else "") for op in spec.epilogue.operands()]


def kernel_params(spec: GemmSpec, suffix: str = "") -> str:
    """The full parameter list ``A, B, [C], [bias], [alpha], [beta], D`` as C declarations."""
    return ", ".join([_param(spec, "A"), _param(spec, "B"), *operand_params(spec, suffix), _param(spec, "D")])


def argument_names(spec: GemmSpec) -> tuple[str, ...]:
    return ("A", "B", *(op.name for op in spec.epilogue.operands()), "D")


def _element_expressions(spec: GemmSpec, column: str = "col") -> tuple[str, str]:
    """How A(row, p) and B(p, column) are read, as stored (row-major, maybe transposed)."""
    a = "A[(size_t)p * M + row]" if spec.a_trans else "A[(size_t)row * K + p]"
    b = f"B[(size_t){column} * K + p]" if spec.b_trans else f"B[(size_t)p * N + {column}]"
    if uses_16_bit(spec):
        return f"to_float({a})", f"to_float({b})"
    return a, b


# 16-bit specs: C and bias are read through a view whose [] converts to float, so the epilogue's
# statements (written for float arrays) stay the same.
_FLOAT_VIEW = """// Reads elements of a 16-bit (or float) array as float.
template <class T> struct FloatView {
    const T* p;
    __device__ float operator[](size_t i) const { return to_float(p[i]); }
};
"""


def _views(spec: GemmSpec) -> str:
    """Declarations that make C / bias read as float inside a 16-bit reference kernel."""
    return "".join(f"    const FloatView<{c_type(spec, op.name)}> {op.name}{{{op.name}_stored}};\n"
                   for op in spec.epilogue.operands() if is_pointer(op))


def _sum(spec: GemmSpec) -> str:
    """The statements that leave output (row, col) before the epilogue in float `v`: the product summed in
    double; for a gated spec, the gate and up rows' sums (export/gated.py) and SwiGLU."""
    a, b = _element_expressions(spec)
    if spec.gated:
        return reference_sum(a, _element_expressions(spec, "gate_row")[1], _element_expressions(spec, "up_row")[1])
    return f"""    double acc = 0.0;
    for (int p = 0; p < K; ++p) acc += (double){a} * (double){b};
    float v = (float)acc;
"""


def kernel_code(spec: GemmSpec, entry: str, linkage: str = "") -> str:
    """CUDA text of the reference kernel `entry` (``linkage`` e.g. 'extern "C" '). 16-bit specs need
    cuda_fp16.h and cuda_bf16.h included before it (reference_header does that)."""
    statements = "".join(f"    {s}\n" for s in spec.epilogue.cuda_statements("row", "col", "N"))
    wide = uses_16_bit(spec)
    helpers = CONVERSIONS + _FLOAT_VIEW if wide else ""
    store = f"from_float<{c_type(spec, 'D')}>(v)" if wide else "v"
    return f"""{helpers}{spec.epilogue.cuda_preamble()}
// Reference for {spec.short()}: one thread per element of D, products summed in double,
// then the epilogue ({spec.epilogue}) applied to the rounded float exactly as the tuned kernel does.
{linkage}__global__ void {entry}({kernel_params(spec, "_stored" if wide else "")}) {{
    const int M = {spec.m}, N = {spec.n}, K = {spec.k};
{_views(spec) if wide else ""}    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
{_sum(spec)}{statements}    D[(size_t)row * N + col] = {store};
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
    includes = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" if uses_16_bit(spec) else ""
    return f"""// Reference GEMM used by main.cu to check the tuned kernel. Written by gemmtune; slow on purpose.
#pragma once
#include <cuda_runtime.h>
{includes}
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

