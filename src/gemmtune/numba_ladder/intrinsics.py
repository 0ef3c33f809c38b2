"""128-bit loads that numba-cuda's Python surface cannot spell, written with its extension API.

numba indexes a float32 pointer or array one element at a time, and NVVM merges neighbouring loads
into one vector load only when it can prove 16-byte alignment, which it cannot for a kernel
argument. These two intrinsics state the alignment (the caller guarantees it) and emit one
`ld.v4.f32`, as `reinterpret_cast<const float4*>` does in the CUDA-C kernels.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.cuda import config as _cuda_config
from numba.cuda.extending import intrinsic

FLOAT4 = types.UniTuple(types.float32, 4)
# Shared tiles read by load_shared4 are declared with this alignment (the simulator takes none).
SHARED_ALIGNMENT = None if _cuda_config.ENABLE_CUDASIM else 16


def _split(context, builder, vector, return_type):
    """A <4 x float> register as numba's 4-tuple of float32."""
    lanes = [builder.extract_element(vector, ir.Constant(ir.IntType(32), i)) for i in range(4)]
    return context.make_tuple(builder, return_type, lanes)


def _load4(builder, element_pointer):
    vector_pointer = builder.bitcast(element_pointer, ir.VectorType(ir.FloatType(), 4).as_pointer(
        element_pointer.type.addrspace))
    return builder.load(vector_pointer, align=16)


@intrinsic
def load_global4(typingctx, pointer, index):
    """pointer[index .. index+3] in one 128-bit load; index must be a multiple of 4 and the
    buffer 16-byte aligned (gemmtune's runtime checks that of every operand it binds)."""
    if not (isinstance(pointer, types.CPointer) and pointer.dtype == types.float32):
        return None
    signature = FLOAT4(pointer, index)

    def codegen(context, builder, sig, args):
        base, offset = args
        return _split(context, builder, _load4(builder, builder.gep(base, [offset])), sig.return_type)

    return signature, codegen


@intrinsic
def load_shared4(typingctx, array, flat_index):
    """array.flat[flat_index .. +3] of a C-contiguous float32 array (shared memory declared with
    alignment=16) in one 128-bit load; flat_index must be a multiple of 4."""
    if not (isinstance(array, types.Array) and array.dtype == types.float32 and array.layout == "C"):
        return None
    signature = FLOAT4(array, flat_index)

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
        return _split(context, builder, _load4(builder, builder.gep(data, [args[1]])), sig.return_type)

    return signature, codegen


if _cuda_config.ENABLE_CUDASIM:  # numba's CUDA simulator runs kernels as Python: plain indexing
    def load_global4(pointer, index):  # noqa: F811 - the simulator's stand-in
        return pointer[index], pointer[index + 1], pointer[index + 2], pointer[index + 3]

    def load_shared4(array, flat_index):  # noqa: F811
        flat = array.reshape(-1)
        return flat[flat_index], flat[flat_index + 1], flat[flat_index + 2], flat[flat_index + 3]
