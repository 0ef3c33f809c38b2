"""``README.md`` of an exported folder: what the kernel computes, how to build, check and call it."""
from __future__ import annotations

from ..spec import GemmSpec
from .cmake import nvcc_arch_flag
from .element_types import c_type
from .gated import weight_layout
from .harness import call_arguments, tolerance_expression
from .header import formula
from .manifest import ExportManifest

_OPERAND_TEXT = {"matrix": "M×N matrix, row-major", "row": "length-M vector", "col": "length-N vector",
                 "scalar": "float scalar"}


def _operand_lines(spec: GemmSpec) -> str:
    a = f"{spec.a_shape[0]}×{spec.a_shape[1]}" + (" (A transposed)" if spec.a_trans else "")
    b = f"{spec.b_shape[0]}×{spec.b_shape[1]}" + (" (B transposed)" if spec.b_trans else "")
    lines = [f"- `A`: {a}, row-major", f"- `B`: {b}, row-major" + (f", (2N)×K: {weight_layout(spec)}" if spec.gated else "")]
    lines += [f"- `{op.name}`: {_OPERAND_TEXT[op.kind]}" for op in spec.epilogue.operands()]
    lines.append(f"- `D`: {spec.m}×{spec.n} output, row-major")
    return "\n".join(lines)


def _argument_kinds(spec: GemmSpec) -> str:
    operands = spec.epilogue.operands()
    pointers = ["A", "B", *(op.name for op in operands if op.kind != "scalar"), "D"]
    scalars = [op.name for op in operands if op.kind == "scalar"]
    typed = ", ".join(f"{p} ({c_type(spec, p)})" for p in pointers)
    return f"{typed}: device pointers" + (f"; {', '.join(scalars)}: float" if scalars else "")


def _types_text(spec: GemmSpec) -> str:
    if spec.dtype in ("fp32", "tf32"):
        return spec.dtype
    return f"{spec.dtype} inputs, {spec.out_dtype} output, fp32 accumulation"


def _timing_lines(manifest: ExportManifest) -> str:
    p, flops = manifest.provenance, manifest.spec.flops
    if p.measured_s is None:
        return "No measurement was recorded for this config; run the harness to time it."
    text = f"Measured {p.measured_s * 1e3:.3f} ms ({flops / p.measured_s / 1e12:.1f} TFLOP/s)"
    if p.cublas_s:
        text += f"; cuBLAS {p.cublas_s * 1e3:.3f} ms ({flops / p.cublas_s / 1e12:.1f} TFLOP/s) in the same run"
    return text + "."


def readme_text(manifest: ExportManifest, driver_api: bool = False) -> str:
    m, spec, name = manifest, manifest.spec, manifest.name
    operands = ", ".join(op.name for op in spec.epilogue.operands())
    return f"""# {name}

`D = {formula(spec)}` for M={spec.m}, N={spec.n}, K={spec.k}, layout `{spec.layout}`, {_types_text(spec)}, built for
`{m.arch}` by gemmtune ({m.family} generator v{m.family_version}).

{_operand_lines(spec)}

The kernel is specialised to exactly this shape; other shapes need another export.

## Use it from C++

```cpp
#include "{name}.cuh"   // in exactly one .cu file: the header defines the kernel
// {_argument_kinds(spec)}; stream: a cudaStream_t (0 = the default stream)
cudaError_t err = {name}({call_arguments(spec, "D")}, stream);
```

Pointers are device pointers (16-byte aligned, as `cudaMalloc` gives); the call is asynchronous
on `stream`. `{name}_info::M/N/K` and friends describe the kernel. With CMake, `add_subdirectory`
this folder and link the interface target `{name}`.

## Build and check the harness

```sh
cmake -B build && cmake --build build && ./build/{name}_check      # CMake >= 3.25
nvcc -O3 -std=c++17 {nvcc_arch_flag(m.arch)} -o {name}_check main.cu{' -lcuda' if driver_api else ''} && ./{name}_check   # or plain nvcc
```

`main.cu` fills the inputs with fixed-seed random values, runs the kernel and a simple reference
kernel (`reference.cuh`, products summed in double), prints the relative error against a tolerance
of `{tolerance_expression(spec)}`, and only when that passes the median time of 20 launches (an argument changes
the count) and TFLOP/s. Exit code 0 = correct, 1 = wrong result, 2 = CUDA error. Times are
warm-L2 times of back-to-back launches.

## Use it from Python

```python
import gemmtune
gemm = gemmtune.load("path/to/this/folder")  # runs {name}.cubin through the CUDA driver
D = gemm(A, B{', ' + operands if operands else ''})          # torch or cupy CUDA arrays; out= optional
```

## Where the config came from

Config source: **{m.provenance.source}** — {m.provenance.detail}.
{_timing_lines(m)}

Resources ({m.arch}, ptxas): {m.resources.summary()}.

## Files

| file | what |
|---|---|
| `{name}.cuh` | kernel + host launcher |
| `main.cu`, `reference.cuh` | self-checking benchmark and its reference |
| `CMakeLists.txt` | builds `{name}_check` for `{m.arch}` |
| `{name}.cubin`, `{name}.ptx` | the kernel compiled by NVRTC {m.nvrtc_version} |
| `kernel.json` | spec, config, generator, arch, config source, times |
| `kernel_source.json` | the kernel source and launch dimensions, for `gemmtune.load` |
"""
