"""Export of a grouped GEMM (issue 69): the kernel as ``<name>.cuh`` with a C++ launcher that takes device pointers
to A, the weights, the group rows (offs: int32 cumulative ends, or counts in the masked layout, on the device), the
bias where the epilogue adds one, and D, plus G, total_m and a stream; ``main.cu`` checking it against a grouped
reference (``reference.cuh``) on uneven groups, CMake, README, kernel.json, the cubin and PTX.

The single-GEMM export's pieces are reused: the launcher body (tensor maps over the pointers, the arguments in
kernel order, the shared-memory opt-in: header.launcher_body), the harness prelude (random inputs, comparison,
timing: harness.prelude), CMake (cmake.cmake_text) and the atomic folder swap (writer.write_folder). The kernel
bakes G, total_m, N and K in (the groups' rows come at run time), so the launcher refuses other G or total_m.

fp8 (issue 70): A and B are fp8 codes (`const unsigned char*`: torch.float8_e4m3fn / float8_e5m2's bytes), D is
bf16 or fp16, and the launcher takes scale_a and scale_b (float32 device pointers, shaped by the scaling as the
header comment says) after the bias; main.cu checks against a host reference of the dequantized operands
(export/grouped_fp8.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..compiler import CompiledKernel, compile_kernel
from ..errors import SpecError
from ..grouped.config import GroupedConfig
from ..grouped.render import render
from ..grouped.spec import GroupedSpec
from .cmake import check_arch, cmake_text, nvcc_arch_flag
from . import grouped_fp8
from .element_types import CONVERSIONS, c_type, type_includes
from .harness import main_opening, prelude, tolerance_expression
from .header import check_name, launcher_body, split_includes
from .manifest import ExportManifest, Provenance, file_names
from .writer import write_folder

GROUPED_KEY = "grouped"  # kernel.json's field holding the grouped spec (gemmtune.load reads it: loader.py)


@dataclass(frozen=True)
class GroupedExport:
    path: Path
    name: str
    spec: GroupedSpec
    config: GroupedConfig
    compiled: CompiledKernel
    provenance: Provenance


def default_name(spec: GroupedSpec) -> str:
    return spec.slug()


def input_type(spec: GroupedSpec) -> str:
    """The C++ type of A's and B's elements: the 16-bit type, or fp8 codes as bytes."""
    return grouped_fp8.FP8_C_TYPE if spec.fp8 else c_type(spec.as_gemm(), "A")


def launcher_params(spec: GroupedSpec) -> str:
    """The launcher's parameters, in the order its callers pass them (the kernel's: bias, then the scales)."""
    t_in, t_out = input_type(spec), c_type(spec.as_gemm(), "D")
    bias = [f"const {t_out}* bias"] if spec.has_bias else []
    scales = ["const float* scale_a", "const float* scale_b"] if spec.fp8 else []
    return ", ".join([f"const {t_in}* A", f"const {t_in}* B", f"const int* {spec.rows_operand}", *bias, *scales,
                      f"{t_out}* D", "int groups", "int total_m", "cudaStream_t stream = 0"])


def _rows_comment(spec: GroupedSpec) -> str:
    if spec.masked_layout:
        return (f"counts (G,) int32 on the device: group g's rows are g·{spec.capacity} .. g·{spec.capacity} + "
                f"min(counts[g], {spec.capacity}) - 1")
    return "offs (G,) int32 on the device: group g's rows are offs[g-1] .. offs[g]-1 (offs[-1] = 0), rising"


def _formula(spec: GroupedSpec) -> str:
    if spec.swiglu:
        return "silu(A·B_gate[g]ᵀ) ⊙ (A·B_up[g]ᵀ)"
    text = "A·B[g]ᵀ"
    for op in spec.epilogue.ops:
        text = {"bias_col": f"{text} + bias[g]", "relu": f"ReLU({text})", "gelu": f"GELU({text})"}[op]
    return text


def _info_block(name: str, spec: GroupedSpec, config: GroupedConfig, arch: str, family: str) -> str:
    config_text = json.dumps(config.to_json(), sort_keys=True).replace('"', '\\"')
    return f"""// What this kernel computes, for programs that want to check before calling it.
namespace {name}_info {{
constexpr int GROUPS = {spec.groups}, TOTAL_M = {spec.total_m}, N = {spec.n}, K = {spec.k};
constexpr int WEIGHT_ROWS = {spec.weight_rows};  // rows of each group's stored weights (SwiGLU: gate then up)
constexpr int CAPACITY = {spec.capacity if spec.masked_layout else 0};  // masked layout: rows each group owns (0: contiguous)
constexpr const char* layout = "{spec.layout}";
constexpr const char* dtype = "{spec.dtype}";  // A and B (fp8: e4m3 or e5m2 codes)
constexpr const char* out_dtype = "{spec.out_dtype}";  // D
constexpr const char* scaling = "{spec.scaling}";  // fp8: tensor, rowwise or block; "none" for 16-bit inputs
constexpr const char* epilogue = "{'swiglu' if spec.swiglu else spec.epilogue}";
constexpr const char* arch = "{arch}";
constexpr const char* family = "{family}";
constexpr const char* config = "{config_text}";
}}  // namespace {name}_info
"""


def grouped_header_text(name: str, spec: GroupedSpec, config: GroupedConfig, compiled: CompiledKernel,
                        gemm: bool = False) -> str:
    """The complete ``<name>.cuh``: the kernel in namespace <name>_kernel, <name>_info, the launcher (gemm: and
    the one-GEMM overload, one_gemm_launcher)."""
    source = compiled.source
    check_name(name, source)
    includes, body = split_includes(source.code)
    host = ["#include <cuda.h>  // cuTensorMapEncodeTiled: link the driver (CUDA::cuda_driver, -lcuda)"]
    hoisted = "".join(f"{line}\n" for line in dict.fromkeys([*host, *type_includes(spec.as_gemm()), *includes]))
    family = f"{source.family} v{source.family_version}"
    return f"""// {name}.cuh — written by gemmtune ({family}) for {compiled.arch}.
// Grouped GEMM: D[rows of g] = {_formula(spec)} for each of {spec.groups} groups, in one launch.
// Include this header in exactly one .cu file: it defines the kernel.
#pragma once
#include <cuda_runtime.h>
{hoisted}
namespace {name}_kernel {{
{body.rstrip()}
}}  // namespace {name}_kernel

{_info_block(name, spec, config, compiled.arch, family)}
// A (total_m, K) row-major; B the weights stored (G, {'2N' if spec.swiglu else 'N'}, K) row-major (torch.nn.Linear's
// layout per group: torch._grouped_mm's b is their transposed view); {_rows_comment(spec)};
// {"bias (G, N), a row per group; " if spec.has_bias else ""}{_fp8_comment(spec)}D (total_m, N): rows no group holds are left as they were.
// Generated for exactly groups = {spec.groups}, total_m = {spec.total_m}, N = {spec.n}, K = {spec.k}: other groups or
// total_m return cudaErrorInvalidValue. The group rows are read on the device (a captured graph replays with new
// ones). Persistent grid: {source.grid[0]} blocks (one per SM of the GPU it was exported for; any count is correct).
// Launches asynchronously on `stream`; device pointers 16-byte aligned (cudaMalloc's are).
inline cudaError_t {name}({launcher_params(spec)}) {{
    if (groups != {name}_info::GROUPS || total_m != {name}_info::TOTAL_M) return cudaErrorInvalidValue;
{_counts_alias(spec)}{launcher_body(name, source)}}}
{one_gemm_launcher(name, spec) if gemm else ""}"""


def _fp8_comment(spec: GroupedSpec) -> str:
    """fp8: what A, B and the scales hold (a comment line of the launcher's header, ending in '// ')."""
    if not spec.fp8:
        return ""
    return (f"A and B hold {spec.dtype} codes, D is {spec.out_dtype};\n// D = (A·scale_a)(B[g]·scale_b[g])ᵀ before the "
            f"epilogue, fp32 sums, with {grouped_fp8.scales_comment(spec)};\n// ")


def gemm_launcher_params(spec: GroupedSpec) -> str:
    """The one-GEMM overload's parameters: the grouped launcher's without offs, groups and total_m."""
    drop = {f"const int* {spec.rows_operand}", "int groups", "int total_m"}
    return ", ".join(p for p in launcher_params(spec).split(", ") if p not in drop)


def one_gemm_launcher(name: str, spec: GroupedSpec) -> str:
    """An fp8 GEMM exported by `gemmtune export` (one group of M rows): an overload without the group rows, which
    passes the kernel a device copy of M (the row count it reads) from a __device__ variable of this header."""
    params = gemm_launcher_params(spec)
    operands = ", ".join(["A", "B", "offs", *(["bias"] * spec.has_bias), *(["scale_a", "scale_b"] * spec.fp8), "D"])
    return f"""
// The single GEMM D (M, N) = {_formula(spec).replace('[g]', '')} of M = {spec.total_m} rows (`gemmtune export` of an fp8 spec):
// A (M, K) row-major, B the weights stored (N, K) row-major (torch._scaled_mm's b is their transposed view){
    ", bias (N,)" if spec.has_bias else ""}; the scales as above with G = 1. The row count the kernel reads lives in
// {name}_rows on the device.
__device__ int {name}_rows[1] = {{{spec.total_m}}};
inline cudaError_t {name}({params}) {{
    int* offs = nullptr;
    const cudaError_t found = cudaGetSymbolAddress(reinterpret_cast<void**>(&offs), {name}_rows);
    if (found != cudaSuccess) return found;
    return {name}({operands}, 1, {spec.total_m}, stream);
}}
"""


def _counts_alias(spec: GroupedSpec) -> str:
    """The masked launcher's counts under the name of the kernel's group-rows argument (offs in both layouts)."""
    return "    const int* offs = counts;  // the kernel's group-rows argument\n" if spec.masked_layout else ""


def reference_text(spec: GroupedSpec) -> str:
    """``reference.cuh``: one thread per element of D, products summed in double, the epilogue in float (fp8: a
    host reference of the dequantized operands, grouped_fp8.reference_text)."""
    if spec.fp8:
        return grouped_fp8.reference_text(spec)
    gemm = spec.as_gemm()
    t_in, t_out = c_type(gemm, "A"), c_type(gemm, "D")
    bias = f", const {t_out}* bias_stored" if spec.has_bias else ""
    view = (f"    const FloatView<{t_out}> bias{{bias_stored + (size_t)g * N}};  // group g's row of bias\n"
            if spec.has_bias else "")
    statements = "".join(f"    {s}\n" for s in spec.epilogue.cuda_statements("row", "col", "N"))
    value = ("    const float gate = (float)acc, up = (float)acc_up;\n    float v = gate / (1.0f + expf(-gate)) * up;\n"
             if spec.swiglu else "    float v = (float)acc;\n")
    up = "        acc_up += (double)to_float(A[(size_t)row * K + p]) * (double)to_float(B[((size_t)g * WEIGHT_ROWS + N + col) * K + p]);\n" \
        if spec.swiglu else ""
    return f"""// Reference grouped GEMM used by main.cu to check the tuned kernel. Written by gemmtune; slow on purpose.
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace gemmtune_reference {{
{CONVERSIONS}
template <class T> struct FloatView {{
    const T* p;
    __device__ float operator[](size_t i) const {{ return to_float(p[i]); }}
}};
{spec.epilogue.cuda_preamble()}
constexpr int GROUPS = {spec.groups}, TOTAL_M = {spec.total_m}, N = {spec.n}, K = {spec.k}, WEIGHT_ROWS = {spec.weight_rows};
constexpr int CAPACITY = {spec.capacity if spec.masked_layout else 0};

{_group_of(spec)}
__global__ void grouped(const {t_in}* A, const {t_in}* B, const int* rows_in{bias}, {t_out}* D) {{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= TOTAL_M || col >= N) return;
    const int g = group_of(rows_in, row);
    if (g < 0) return;
{view}    double acc = 0.0{", acc_up = 0.0" if spec.swiglu else ""};
    for (int p = 0; p < K; ++p) {{
        acc += (double)to_float(A[(size_t)row * K + p]) * (double)to_float(B[((size_t)g * WEIGHT_ROWS + col) * K + p]);
{up}    }}
{value}{statements}    D[(size_t)row * N + col] = from_float<{t_out}>(v);
}}

// Launch the reference on `stream`; returns the launch error, if any.
inline cudaError_t launch(const {t_in}* A, const {t_in}* B, const int* rows_in{bias.replace('_stored', '')}, {t_out}* D,
                          cudaStream_t stream) {{
    const dim3 block(16, 16), grid((N + 15) / 16, (TOTAL_M + 15) / 16);
    grouped<<<grid, block, 0, stream>>>(A, B, rows_in{', bias' if spec.has_bias else ''}, D);
    return cudaGetLastError();
}}
}}  // namespace gemmtune_reference
"""


def _group_of(spec: GroupedSpec) -> str:
    """group_of(rows_in, row): the group holding `row`, or -1 (past the last group's end, past a masked count)."""
    if spec.masked_layout:
        return """// The group holding `row`, or -1 (past the group's count of its CAPACITY rows).
__device__ int group_of(const int* rows_in, int row) {
    const int g = row / CAPACITY;
    return row - g * CAPACITY < min(max(rows_in[g], 0), CAPACITY) ? g : -1;
}
"""
    return """// The group holding `row`, or -1 (past the last group's end); ends clamped to [0, TOTAL_M] as the kernel does.
__device__ int group_of(const int* rows_in, int row) {
    for (int g = 0; g < GROUPS; ++g)
        if (row < min(max(rows_in[g], 0), TOTAL_M)) return g;
    return -1;
}
"""


def harness_rows(spec: GroupedSpec) -> list[int]:
    """The group rows main.cu runs: uneven ends rising as g² (small and empty groups first) over total_m, or
    counts of 0, a third, two thirds and all of the capacity in turn."""
    if spec.masked_layout:
        return [spec.capacity * (g % 4) // 3 for g in range(spec.groups)]
    return [spec.total_m * (g + 1) ** 2 // spec.groups ** 2 for g in range(spec.groups)]


def harness_text(name: str, spec: GroupedSpec, arch: str, gemm: bool = False) -> str:
    """``main.cu``: checks the kernel against reference.cuh on uneven groups over a NaN-poisoned D (rows no group
    holds must stay NaN), then times it (fp8: grouped_fp8.harness_text, against a host reference)."""
    if spec.fp8:
        return grouped_fp8.harness_text(name, spec, arch, harness_rows(spec), gemm)
    gemm = spec.as_gemm()
    t_in, t_out = c_type(gemm, "A"), c_type(gemm, "D")
    rows_in = ", ".join(str(r) for r in harness_rows(spec))
    bias_decl = f"    {t_out}* bias = random_device_buffer<{t_out}>((size_t)G * N, 3);\n" if spec.has_bias else ""
    bias_arg = ", bias" if spec.has_bias else ""
    return f"""// main.cu — written by gemmtune: checks {name} against a grouped reference on this GPU, then times it.
// Build: cmake -B build && cmake --build build   (or: nvcc -O3 -std=c++17 {nvcc_arch_flag(arch)} -o {name}_check main.cu -lcuda)
// Run:   ./{name}_check [timed runs, default 20]; exit code 0 = correct, 1 = wrong result, 2 = CUDA error.
{prelude(gemm)}
#include "{name}.cuh"
#include "reference.cuh"

{main_opening(name)}
    constexpr int G = info::GROUPS, TOTAL_M = info::TOTAL_M, N = info::N, K = info::K;
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    std::printf("{name}: G=%d total_m=%d N=%d K=%d layout=%s epilogue=%s built for %s, running on %s (sm_%d%d)\\n",
                G, TOTAL_M, N, K, info::layout, info::epilogue, info::arch, prop.name, prop.major, prop.minor);

    // Uneven groups ({'counts' if spec.masked_layout else 'cumulative ends'}), on the device as the kernel reads them.
    const std::vector<int> rows_host = {{{rows_in}}};
    int* rows_in = nullptr;
    CHECK_CUDA(cudaMalloc(&rows_in, G * sizeof(int)));
    CHECK_CUDA(cudaMemcpy(rows_in, rows_host.data(), G * sizeof(int), cudaMemcpyHostToDevice));
    {t_in}* A = random_device_buffer<{t_in}>((size_t)TOTAL_M * K, 1);
    {t_in}* B = random_device_buffer<{t_in}>((size_t)G * info::WEIGHT_ROWS * K, 2);
{bias_decl}    {t_out}* D = nullptr;  // the tuned kernel's output
    {t_out}* R = nullptr;  // the reference's output
    CHECK_CUDA(cudaMalloc(&D, (size_t)TOTAL_M * N * sizeof({t_out})));
    CHECK_CUDA(cudaMalloc(&R, (size_t)TOTAL_M * N * sizeof({t_out})));
    // Poison both with NaN (all bits set): a row no group holds must stay NaN in D, as it does in R.
    CHECK_CUDA(cudaMemset(D, 0xFF, (size_t)TOTAL_M * N * sizeof({t_out})));
    CHECK_CUDA(cudaMemset(R, 0xFF, (size_t)TOTAL_M * N * sizeof({t_out})));

    CHECK_CUDA({name}(A, B, rows_in{bias_arg}, D, G, TOTAL_M, 0));
    CHECK_CUDA(gemmtune_reference::launch(A, B, rows_in{bias_arg}, R, 0));
    CHECK_CUDA(cudaDeviceSynchronize());

    // Rows the reference wrote are compared; every other row must be NaN in both.
    const std::vector<float> d = to_host(D, (size_t)TOTAL_M * N), r = to_host(R, (size_t)TOTAL_M * N);
    std::vector<float> held_d, held_r;
    size_t stray = 0;
    for (size_t i = 0; i < d.size(); ++i) {{
        if (std::isnan(r[i])) {{ stray += !std::isnan(d[i]); continue; }}
        held_d.push_back(d[i]);
        held_r.push_back(r[i]);
    }}
    const double tolerance = {tolerance_expression(gemm)};
    const Check check = compare(held_d, held_r);
    const bool ok = check.non_finite == 0 && stray == 0 && check.rel_error <= tolerance;
    std::printf("check: %zu values, rel_error=%.3e tolerance=%.3e non_finite=%zu written_outside_groups=%zu %s\\n",
                held_d.size(), check.rel_error, tolerance, check.non_finite, stray, ok ? "PASS" : "FAIL");
    if (ok) {{  // never time a wrong kernel
        const float ms = median_ms([&] {{ return {name}(A, B, rows_in{bias_arg}, D, G, TOTAL_M, 0); }}, reps);
        const double flops = 2.0 * (double)held_d.size() * K * info::WEIGHT_ROWS / N;
        std::printf("time: %.4f ms (median of %d runs), %.2f TFLOP/s\\n", ms, reps, flops / (ms * 1e-3) / 1e12);
    }}
{"".join(f"    CHECK_CUDA(cudaFree({p}));{chr(10)}" for p in ["rows_in", "A", "B", *(["bias"] if spec.has_bias else []), "D", "R"])}    return ok ? 0 : 1;
}}
"""


def readme_text(name: str, spec: GroupedSpec, config: GroupedConfig, arch: str, provenance: Provenance,
                gemm: bool = False) -> str:
    return f"""# {name}

A grouped GEMM written by gemmtune for {arch}: {spec.groups} groups, total_m = {spec.total_m}, N = {spec.n}, K = {spec.k},
{_types_line(spec)}, {'SwiGLU' if spec.swiglu else f'epilogue {spec.epilogue}'}, {spec.layout} layout.
Config ({provenance.describe()}): `{json.dumps(config.to_json(), sort_keys=True)}`.

    #include "{name}.cuh"
    cudaError_t err = {name}({launcher_params(spec).replace(' = 0', '')});

The group rows ({spec.rows_operand}) live on the device and may change between calls (or graph replays);
G and total_m must be the ones above. Check on the GPU: `cmake -B build && cmake --build build && ./build/{name}_check`.
{_scales_readme(spec)}
{_python_readme(name, spec, gemm)}
"""


def _python_readme(name: str, spec: GroupedSpec, gemm: bool) -> str:
    if gemm:
        return (f"One GEMM of M = {spec.total_m} rows: `{name}({gemm_launcher_params(spec).replace(' = 0', '')})` "
                "needs no group rows.\nFrom Python: `gemmtune.load(this folder)` gives a callable on torch tensors "
                f"taking torch._scaled_mm's operands, `fn(A, B, {'bias, ' if spec.has_bias else ''}scale_a, scale_b)` "
                "(B: the (K, N) view of the weights stored (N, K)), returning D.")
    return (f"From Python: `gemmtune.load(this folder)` gives a callable on torch tensors, `fn({_load_call(spec)})`\n"
            "(B: torch's (G, K, N) view of the weights stored (G, N, K)), returning D.")



def _types_line(spec: GroupedSpec) -> str:
    return f"{spec.dtype} x {spec.dtype} -> {spec.out_dtype}, {spec.scaling} scales" if spec.fp8 else spec.dtype


def _scales_readme(spec: GroupedSpec) -> str:
    return f"\nfp8: A and B are {spec.dtype} codes; {grouped_fp8.scales_comment(spec)}.\n" if spec.fp8 else ""


def _load_call(spec: GroupedSpec) -> str:
    return ", ".join(["A", "B", spec.rows_operand, *(["bias"] * spec.has_bias), *(["scale_a", "scale_b"] * spec.fp8)])


def grouped_files(name: str, spec: GroupedSpec, config: GroupedConfig, compiled: CompiledKernel,
                  provenance: Provenance, gemm: bool = False) -> dict[str, bytes]:
    """File name -> contents of the export folder (the single-GEMM export's file names); gemm: an fp8 GEMM's
    export (one group), whose header adds the launcher without group rows and whose kernel.json says so."""
    files = file_names(name)
    manifest = ExportManifest.from_compiled(name, compiled, provenance).to_json()
    manifest[GROUPED_KEY] = {"groups": spec.groups, "total_m": spec.total_m, "n": spec.n, "k": spec.k,
                             "dtype": spec.dtype, "epilogue": str(spec.epilogue), "swiglu": spec.swiglu,
                             "layout": spec.layout, "out_dtype": spec.out_dtype, "scaling": spec.scaling,
                             "config": config.to_json(), "gemm": gemm}
    texts = {files["header"]: grouped_header_text(name, spec, config, compiled, gemm),
             files["harness"]: harness_text(name, spec, compiled.arch, gemm),
             files["reference"]: reference_text(spec),
             files["cmake"]: cmake_text(name, compiled.arch, compiled.source.options, driver_api=True),
             files["readme"]: readme_text(name, spec, config, compiled.arch, provenance, gemm),
             files["ptx"]: compiled.ptx,
             files["manifest"]: json.dumps(manifest, indent=1) + "\n",
             files["kernel_source"]: json.dumps(compiled.source.to_json(), indent=1) + "\n"}
    return {**{k: v.encode() for k, v in texts.items()}, files["cubin"]: compiled.cubin}


def export_grouped(spec: GroupedSpec, config: GroupedConfig, out: Path, arch: str = "sm_90a", name: str | None = None,
                   sm_count: int | None = None, provenance: Provenance | None = None,
                   cache_dir: Path | None = None, gemm: bool = False) -> GroupedExport:
    """Render `spec` with `config` on a grid of `sm_count` blocks (None: the sm_90a table's SMs), compile with
    NVRTC and write the folder `out` atomically. gemm: `spec` is an fp8 GEMM's one group (gemmtune export): the
    header adds a launcher without group rows."""
    if gemm and (spec.groups != 1 or not spec.fp8 or spec.masked_layout):
        raise SpecError(f"a one-GEMM grouped export is one contiguous group of fp8 inputs, not {spec.slug()}")
    if arch != "sm_90a":
        check_arch(arch)
        raise SpecError(f"grouped GEMM kernels use wgmma and TMA: export them for sm_90a, not {arch}")
    compiled = compile_kernel(render(spec, config, sm_count), arch, cache_dir)
    name = check_name(name or default_name(spec), compiled.source)
    provenance = provenance or Provenance("given", "grouped config passed in directly")
    write_folder(Path(out), grouped_files(name, spec, config, compiled, provenance, gemm))
    return GroupedExport(Path(out), name, spec, config, compiled, provenance)
