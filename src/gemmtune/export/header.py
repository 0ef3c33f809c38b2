"""``<name>.cuh``: the generated kernel plus a host launcher with a plain C++ signature.

The kernel text is wrapped in ``namespace <name>_kernel`` so its file-scope helpers (``M``, ``N``,
``K``, tile constants, ``epilogue``) cannot clash with the including program; the entry keeps
``extern "C"`` linkage, so its name is the same as in the cubin. ``#include`` lines of the kernel
are hoisted above the namespace.
"""
from __future__ import annotations

import json
import re

from ..errors import SpecError
from ..kernel_source import KernelSource
from ..spec import GemmSpec
from .reference import operand_params

DEFAULT_SMEM_LIMIT = 48 * 1024  # dynamic shared memory a block gets without opting in
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INPUT_POINTERS = ("A", "B", "C", "bias")


def check_name(name: str, source: KernelSource) -> str:
    """`name` if it can be the launcher's C identifier, else SpecError."""
    if not _IDENTIFIER.match(name):
        raise SpecError(f"export name '{name}' is not a C identifier (letters, digits, _; not starting with a digit)")
    if name == source.entry:
        raise SpecError(f"export name '{name}' is the kernel's own entry name; choose another")
    return name


def launcher_params(spec: GemmSpec) -> str:
    """``const float* A, const float* B, [operands,] float* D, cudaStream_t stream``."""
    return ", ".join(["const float* A", "const float* B", *operand_params(spec), "float* D",
                      "cudaStream_t stream = 0"])


def _call_argument(name: str) -> str:
    # Kernels may declare inputs without const (TVM does); const_cast keeps both kinds callable.
    return f"const_cast<float*>({name})" if name in _INPUT_POINTERS else name


def split_includes(code: str) -> tuple[list[str], str]:
    """(the kernel's #include lines, the rest of its text)."""
    includes = [line for line in code.splitlines() if line.lstrip().startswith("#include")]
    body = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#include"))
    return includes, body


def _smem_opt_in(source: KernelSource, kernel: str) -> str:
    if source.dynamic_smem <= DEFAULT_SMEM_LIMIT:
        return ""
    return f"""    // More than 48 KiB of dynamic shared memory needs an explicit opt-in per kernel.
    cudaError_t attr = cudaFuncSetAttribute({kernel}, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (attr != cudaSuccess) return attr;
"""


def _info_block(name: str, source: KernelSource, arch: str) -> str:
    spec = source.spec
    config = json.dumps(source.config, sort_keys=True).replace("\\", "\\\\").replace('"', '\\"')
    return f"""// What this kernel computes, for programs that want to check before calling it.
namespace {name}_info {{
constexpr int M = {spec.m}, N = {spec.n}, K = {spec.k};
constexpr double flops = 2.0 * M * N * K;
constexpr const char* layout = "{spec.layout}";      // {_layout_comment(spec)}
constexpr const char* epilogue = "{spec.epilogue}";
constexpr const char* arch = "{arch}";
constexpr const char* family = "{source.family} v{source.family_version}";
constexpr const char* config = "{config}";
}}  // namespace {name}_info
"""


def _layout_comment(spec: GemmSpec) -> str:
    a = "A stored K×M" if spec.a_trans else "A stored M×K"
    b = "B stored N×K" if spec.b_trans else "B stored K×N"
    return f"{a}, {b}, D M×N, all row-major"


def _launcher(name: str, source: KernelSource) -> str:
    spec, kernel = source.spec, f"{name}_kernel::{source.entry}"
    call = ", ".join(_call_argument(arg) for arg in source.args)
    g, b = source.grid, source.block
    return f"""// D = {formula(spec)} for exactly M={spec.m}, N={spec.n}, K={spec.k} ({_layout_comment(spec)}).
// Launches asynchronously on `stream`; returns cudaSuccess or the launch error. Pointers are
// device pointers to fp32 data, 16-byte aligned (cudaMalloc's are).
inline cudaError_t {name}({launcher_params(spec)}) {{
    const dim3 grid({g[0]}, {g[1]}, {g[2]}), block({b[0]}, {b[1]}, {b[2]});
    const size_t smem = {source.dynamic_smem};  // dynamic shared memory in bytes
{_smem_opt_in(source, kernel)}    {kernel}<<<grid, block, smem, stream>>>({call});
    return cudaGetLastError();
}}
"""


_FORMULA = {"alpha": "alpha·{x}", "bias_row": "{x} + bias[row]", "bias_col": "{x} + bias[col]",
            "relu": "ReLU({x})", "gelu": "GELU({x})", "add": "{x} + C", "beta": "{x} + beta·C"}


def formula(spec: GemmSpec) -> str:
    """The epilogue chain as a formula, e.g. 'ReLU(A·B) + C'."""
    text = "A·B"
    for name in spec.epilogue.ops:
        inner = f"({text})" if name == "alpha" and " " in text else text
        text = _FORMULA[name].format(x=inner)
    return text


def header_text(name: str, source: KernelSource, arch: str) -> str:
    """The complete ``<name>.cuh``."""
    check_name(name, source)
    includes, body = split_includes(source.code)
    hoisted = "".join(f"{line}\n" for line in includes)
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
