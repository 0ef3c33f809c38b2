"""``<name>.cuh``: the generated kernel plus a host launcher with a plain C++ signature.

The kernel text is wrapped in ``namespace <name>_kernel`` so its file-scope helpers (``M``, ``N``,
``K``, tile constants, ``epilogue``) cannot clash with the including program; the entry keeps
``extern "C"`` linkage, so its name is the same as in the cubin. ``#include`` lines of the kernel
are hoisted above the namespace.

The launcher takes typed pointers (``float``, ``__half``, ``__nv_bfloat16`` per operand) and launches
through ``cudaLaunchKernel`` with the arguments packed as the runtime packs them (pointers, float
scalars, 128-byte tensor maps by value), so it works whatever C++ types the kernel declares. A
kernel with TMA descriptors gets each one built by the launcher with the driver's
``cuTensorMapEncodeTiled`` from its TensorMapArg and the operand's pointer.
"""
from __future__ import annotations

import json
import re

from ..errors import SpecError
from ..kernel_source import PORTABLE_CLUSTER_BLOCKS, KernelSource, StagedOperand, TensorMapArg
from ..kernels.parts.staging import THREADS, stage_entry, stage_grid
from ..spec import GemmSpec
from .element_types import type_includes
from .gated import FORMULA as GATED_FORMULA
from .gated import info_flag as gated_info
from .gated import info_rows as gated_rows
from .gated import weight_layout
from .reference import operand_params

DEFAULT_SMEM_LIMIT = 48 * 1024  # dynamic shared memory a block gets without opting in
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TMA_DATA_TYPES = {"fp16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
                  "fp32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
                  "e4m3": "CU_TENSOR_MAP_DATA_TYPE_UINT8", "e5m2": "CU_TENSOR_MAP_DATA_TYPE_UINT8"}  # fp8: bytes, as tensor_map.py
TMA_SWIZZLES = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
                128: "CU_TENSOR_MAP_SWIZZLE_128B"}


def check_name(name: str, source: KernelSource) -> str:
    """`name` if it can be the launcher's C identifier, else SpecError."""
    if not _IDENTIFIER.match(name):
        raise SpecError(f"export name '{name}' is not a C identifier (letters, digits, _; not starting with a digit)")
    if name == source.entry:
        raise SpecError(f"export name '{name}' is the kernel's own entry name; choose another")
    return name


def launcher_params(spec: GemmSpec) -> str:
    """``const T* A, const T* B, [operands,] T_out* D, cudaStream_t stream`` with each operand's C++ type."""
    from .reference import kernel_params

    return f"{kernel_params(spec)}, cudaStream_t stream = 0"


def _argument_slot(name: str, source: KernelSource) -> str:
    """A local holding kernel argument `name` as the kernel receives it (cudaLaunchKernel takes its address)."""
    if source.tensor_map(name) is not None:
        return ""  # the CUtensorMap local built by _tensor_map_block
    if name in ("alpha", "beta"):
        return f"    float arg_{name} = {name};\n"
    return f"    const void* arg_{name} = {name};\n"


def _argument_address(name: str, source: KernelSource) -> str:
    return f"&{name}" if source.tensor_map(name) is not None else f"&arg_{name}"


def _dims(values: tuple[int, ...], c_type: str) -> str:
    return f"{{{', '.join(f'({c_type}){v}' for v in values)}}}"


def _staging_block(staged: StagedOperand, memcpy: bool) -> str:
    """A staged operand's workspace (allocated at the first call, kept for the program's life) and,
    for a source without the staging kernel, its copy by cudaMemcpy2DAsync, as the runtime does."""
    name = f"staged_{staged.operand}"
    text = f"""    // {staged.operand}'s rows ({staged.row_bytes} B) do not start on 32-byte boundaries: TMA reads a copy
    // whose rows start every {staged.pitch} B. One workspace per program (calls take turns across streams).
    static void* {name} = nullptr;
    if ({name} == nullptr) {{
        const cudaError_t got = cudaMalloc(&{name}, (size_t){staged.workspace_bytes});
        if (got != cudaSuccess) return got;
    }}
"""
    if memcpy:
        text += f"""    const cudaError_t copied_{staged.operand} = cudaMemcpy2DAsync({name}, {staged.pitch}, {staged.operand}, {staged.row_bytes},
                                                 {staged.row_bytes}, {staged.rows}, cudaMemcpyDeviceToDevice, stream);
    if (copied_{staged.operand} != cudaSuccess) return copied_{staged.operand};
"""
    return text


def _stage_launch(name: str, source: KernelSource) -> str:
    """One launch of the staging kernel (kernels/parts/staging.py) that fills every workspace."""
    slots = "".join(f"    const void* stage_{s.operand}_src = {s.operand};\n    void* stage_{s.operand}_dst = staged_{s.operand};\n"
                    for s in source.staged)
    addresses = ", ".join(f"&stage_{s.operand}_src, &stage_{s.operand}_dst" for s in source.staged)
    return f"""    // The staging kernel copies {' and '.join(s.operand for s in source.staged)} into the workspace(s), 16 bytes a thread.
{slots}    void* stage_args[] = {{{addresses}}};
    const cudaError_t stage_launched = cudaLaunchKernel({name}_kernel::{stage_entry(source.entry)}, dim3({stage_grid(source.staged)[0]}), dim3({THREADS}),
                                                stage_args, 0, stream);
    if (stage_launched != cudaSuccess) return stage_launched;
"""


def _tensor_map_block(tmap: TensorMapArg, staged: tuple[str, ...] = ()) -> str:
    """Build CUtensorMap `tmap.name` over the operand's pointer (its workspace, if staged), exactly as
    the runtime does at bind time."""
    rank = len(tmap.dims)
    pointer = f"staged_{tmap.operand}" if tmap.operand in staged else tmap.operand
    return f"""    // {tmap.name}: TMA descriptor of {tmap.operand} ({tmap.dtype}), dims {tmap.dims} innermost first, box {tmap.box}.
    CUtensorMap {tmap.name};
    {{
        const cuuint64_t dims[{rank}] = {_dims(tmap.dims, "cuuint64_t")};
        const cuuint64_t strides[{max(rank - 1, 1)}] = {_dims(tmap.strides or (0,), "cuuint64_t")};  // bytes, dims[1:]
        const cuuint32_t box[{rank}] = {_dims(tmap.box, "cuuint32_t")};
        const cuuint32_t element_strides[{rank}] = {_dims((1,) * rank, "cuuint32_t")};
        const CUresult made = cuTensorMapEncodeTiled(
            &{tmap.name}, {TMA_DATA_TYPES[tmap.dtype]}, {rank}, const_cast<void*>(static_cast<const void*>({pointer})),
            dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, {TMA_SWIZZLES[tmap.swizzle]},
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);  // out of bounds reads as 0
        if (made != CUDA_SUCCESS) return cudaErrorInvalidValue;
    }}
"""


def split_includes(code: str) -> tuple[list[str], str]:
    """(the kernel's #include lines, the rest of its text)."""
    includes = [line for line in code.splitlines() if line.lstrip().startswith("#include")]
    body = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#include"))
    return includes, body


def _launch_opt_ins(source: KernelSource, kernel: str) -> str:
    """The launcher's opt-ins: more than 48 KiB of dynamic shared memory, clusters past the portable size."""
    text = ""
    if source.dynamic_smem > DEFAULT_SMEM_LIMIT:
        text += f"""    // More than 48 KiB of dynamic shared memory needs an explicit opt-in per kernel.
    cudaError_t attr = cudaFuncSetAttribute({kernel}, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (attr != cudaSuccess) return attr;
"""
    if source.cluster_blocks > PORTABLE_CLUSTER_BLOCKS:
        text += f"""    // Its clusters of {source.cluster_blocks} blocks exceed the portable {PORTABLE_CLUSTER_BLOCKS}: allowed per kernel (sm_90+).
    cudaError_t wide = cudaFuncSetAttribute({kernel}, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (wide != cudaSuccess) return wide;
"""
    return text


def _info_block(name: str, source: KernelSource, arch: str) -> str:
    spec = source.spec
    config = json.dumps(source.config, sort_keys=True).replace("\\", "\\\\").replace('"', '\\"')
    return f"""// What this kernel computes, for programs that want to check before calling it.
namespace {name}_info {{
constexpr int M = {spec.m}, N = {spec.n}, K = {spec.k};
{gated_rows(spec)}constexpr double flops = 2.0 * M * {"WEIGHT_ROWS" if spec.gated else "N"} * K;
constexpr const char* layout = "{spec.layout}";      // {_layout_comment(spec)}
constexpr const char* epilogue = "{spec.epilogue}";
{gated_info(spec)}constexpr const char* arch = "{arch}";
constexpr const char* family = "{source.family} v{source.family_version}";
constexpr const char* config = "{config}";
}}  // namespace {name}_info
"""


def _layout_comment(spec: GemmSpec) -> str:
    if spec.gated:
        return "A stored M×K, B stored (2N)×K (gate and up rows interleaved by 8), D M×N, all row-major"
    a = "A stored K×M" if spec.a_trans else "A stored M×K"
    b = "B stored N×K" if spec.b_trans else "B stored K×N"
    return f"{a}, {b}, D M×N, all row-major"


def _types_comment(spec: GemmSpec) -> str:
    if spec.dtype == "fp32":
        return "fp32 data"
    if spec.dtype == "tf32":
        return "fp32 data multiplied as tf32"
    return f"A, B {spec.dtype}, D (and C/bias) {spec.out_dtype}, accumulated in fp32"


# One launch at a time across streams for kernels that keep state of their own (the C++ twin of
# stream_order.py): every header that needs it defines this once per program.
ORDER_STATE = r"""#ifndef GEMMTUNE_ORDER_STATE
#define GEMMTUNE_ORDER_STATE
// A kernel that keeps state of its own between launches (a split tile's partial sums and the flags
// its blocks wait on, in module memory; a staged operand's workspace) must not run twice at once:
// its launcher records this event after every launch outside a CUDA-graph capture, and a launch on
// another stream than the last waits on it first. Inside a capture the graph orders the launch; do
// not replay such a graph while the same launcher runs on another stream.
struct gemmtune_order_state {
    std::mutex lock;
    cudaEvent_t done = nullptr;   // recorded after the last launch outside a capture
    cudaStream_t last = nullptr;  // that launch's stream
    bool launched = false;
};
constexpr int GEMMTUNE_MAX_DEVICES = 64;
// Kernels whose blocks wait on each other (split tails) need the whole GPU: every such launcher of the
// program shares one order a device, so that two of their grids never split the SMs between them.
inline gemmtune_order_state& gemmtune_co_resident_order(int device) {
    static gemmtune_order_state states[GEMMTUNE_MAX_DEVICES];
    return states[device % GEMMTUNE_MAX_DEVICES];
}
#endif
"""


def _order_state(name: str, source: KernelSource) -> str:
    """ORDER_STATE and this launcher's own order (or none: co-resident kernels share one)."""
    if not source.keeps_state:
        return ""
    own = "" if source.co_resident else f"""inline gemmtune_order_state& {name}_order(int device) {{
    static gemmtune_order_state states[GEMMTUNE_MAX_DEVICES];
    return states[device % GEMMTUNE_MAX_DEVICES];
}}
"""
    return ORDER_STATE + own + "\n"


def _order_before(name: str, source: KernelSource) -> str:
    """The launcher's first statements where it orders launches: the lock, then the wait."""
    if not source.keeps_state:
        return ""
    getter = "gemmtune_co_resident_order" if source.co_resident else f"{name}_order"
    return f"""    // One launch at a time across streams (gemmtune_order_state, above).
    int device = 0;
    const cudaError_t got_device = cudaGetDevice(&device);
    if (got_device != cudaSuccess) return got_device;
    gemmtune_order_state& order = {getter}(device);
    std::lock_guard<std::mutex> hold(order.lock);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {{
        (void)cudaGetLastError();  // the legacy stream while another stream captures: left to the graph
        capture = cudaStreamCaptureStatusActive;
    }}
    const bool ordered = capture == cudaStreamCaptureStatusNone;
    if (ordered && order.launched && order.last != stream) {{
        const cudaError_t waited = cudaStreamWaitEvent(stream, order.done, 0);
        if (waited != cudaSuccess) return waited;
    }}
"""


def _order_after(source: KernelSource) -> str:
    """After a launch that the launcher orders: the event marks it."""
    if not source.keeps_state:
        return ""
    return """    if (launched == cudaSuccess && ordered) {
        if (order.done == nullptr) {
            const cudaError_t created = cudaEventCreateWithFlags(&order.done, cudaEventDisableTiming);
            if (created != cudaSuccess) return created;
        }
        const cudaError_t recorded = cudaEventRecord(order.done, stream);
        if (recorded != cudaSuccess) return recorded;
        order.last = stream;
        order.launched = true;
    }
"""


def launcher_body(name: str, source: KernelSource) -> str:
    """The launcher's statements, from the grid to the returned error: opt-ins, staged copies, tensor maps
    built over the operands' pointers, the arguments in kernel order, the launch (the parameters it reads
    are named as the kernel's arguments, plus `stream`)."""
    kernel = f"{name}_kernel::{source.entry}"
    slots = "".join(_argument_slot(arg, source) for arg in source.args)
    addresses = ", ".join(_argument_address(arg, source) for arg in source.args)
    staged = tuple(s.operand for s in source.staged)
    maps = "".join(_staging_block(s, memcpy=not source.stage_kernel) for s in source.staged)
    maps += _stage_launch(name, source) if source.stage_kernel else ""
    maps += "".join(_tensor_map_block(t, staged) for t in source.tensor_maps)
    g, b = source.grid, source.block
    return f"""    const dim3 grid({g[0]}, {g[1]}, {g[2]}), block({b[0]}, {b[1]}, {b[2]});
    const size_t smem = {source.dynamic_smem};  // dynamic shared memory in bytes
{_order_before(name, source)}{_launch_opt_ins(source, kernel)}{maps}    // Arguments in the kernel's parameter order, each passed by the address of its value.
{slots}    void* args[] = {{{addresses}}};
{_launch_call(source, kernel)}{_order_after(source)}    return launched != cudaSuccess ? launched : cudaGetLastError();
"""


def _launcher(name: str, source: KernelSource) -> str:
    spec = source.spec
    state = ("\n// The kernel keeps state of its own between launches: a call on another stream than the last\n"
             "// waits for the last call's launch (gemmtune_order_state)." if source.keeps_state else "")
    return f"""{_order_state(name, source)}// D = {formula(spec)} for exactly M={spec.m}, N={spec.n}, K={spec.k} ({_layout_comment(spec)}).
{_weight_comment(spec)}// Launches asynchronously on `stream`; returns cudaSuccess or the launch error. Pointers are
// device pointers ({_types_comment(spec)}), 16-byte aligned (cudaMalloc's are).{state}
inline cudaError_t {name}({launcher_params(spec)}) {{
{launcher_body(name, source)}}}
"""


def _launch_call(source: KernelSource, kernel: str) -> str:
    """The launch: plain, or for a kernel with the dependent-launch prologue (sm_90+) with programmatic
    stream serialization, so that it overlaps the end of the kernel before it on `stream`."""
    if not source.dependent_launch:
        return "    cudaError_t launched = cudaLaunchKernel({kernel}, grid, block, args, smem, stream);\n".format(kernel=kernel)
    return f"""    // The kernel waits for the one before it on `stream` itself (griddepcontrol.wait) after asking L2
    // for its share of the streamed operand: allowed to start early, it overlaps that kernel's end.
    cudaLaunchAttribute overlap[1];
    overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {{}};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = overlap;
    config.numAttrs = 1;
    cudaError_t launched = cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(&{kernel}), args);
"""


_FORMULA = {"alpha": "alpha·{x}", "bias_row": "{x} + bias[row]", "bias_col": "{x} + bias[col]",
            "relu": "ReLU({x})", "gelu": "GELU({x})", "add": "{x} + C", "beta": "{x} + beta·C"}


def _weight_comment(spec: GemmSpec) -> str:
    """The launcher comment's lines on a gated spec's weight (none for a plain spec)."""
    if not spec.gated:
        return ""
    words, lines, line = f"B stored {spec.gemm_n}×{spec.k} = (2N)×K, {weight_layout(spec)}".split(), [], "//"
    for word in words:
        if len(line) + len(word) > 110:
            lines.append(line)
            line = "//"
        line += " " + word
    return "\n".join([*lines, line + "."]) + "\n"


def formula(spec: GemmSpec) -> str:
    """The epilogue chain as a formula, e.g. 'ReLU(A·B) + C'; a gated spec's SwiGLU."""
    if spec.gated:
        return GATED_FORMULA
    text = "A·B"
    for name in spec.epilogue.ops:
        inner = f"({text})" if name == "alpha" and " " in text else text
        text = _FORMULA[name].format(x=inner)
    return text


def header_text(name: str, source: KernelSource, arch: str) -> str:
    """The complete ``<name>.cuh``."""
    check_name(name, source)
    includes, body = split_includes(source.code)
    host = ["#include <cuda.h>  // cuTensorMapEncodeTiled: link the driver (CUDA::cuda_driver, -lcuda)"] \
        if source.tensor_maps else []
    order = ["#include <mutex>  // launches of a kernel with state of its own take turns"] if source.keeps_state else []
    hoisted = "".join(f"{line}\n" for line in dict.fromkeys([*host, *order, *type_includes(source.spec), *includes]))
    return f"""// {name}.cuh — written by gemmtune ({source.family} v{source.family_version}) for {arch}.
// D = {formula(source.spec)}, {source.spec.short()}.
// Include this header in exactly one .cu file: it defines the kernel.
#pragma once
#include <cuda_runtime.h>
{hoisted}
namespace {name}_kernel {{
{body.rstrip()}
}}  // namespace {name}_kernel

{_info_block(name, source, arch)}
{_launcher(name, source)}"""
