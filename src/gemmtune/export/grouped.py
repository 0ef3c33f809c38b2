"""Export of a grouped GEMM (issue 69): the kernel as ``<name>.cuh`` with a C++ launcher that takes device pointers
to A, the weights, the group rows (offs: int32 cumulative ends, or counts in the masked layout, on the device), the
bias where the epilogue adds one, and D, plus G, total_m and a stream; ``main.cu`` checking it against a grouped
reference (``reference.cuh``) on uneven groups, CMake, README, kernel.json, the cubin and PTX.

The single-GEMM export's pieces are reused: the launcher body (tensor maps over the pointers, the arguments in
kernel order, the shared-memory opt-in: header.launcher_body), the harness prelude (random inputs, comparison,
timing: harness.prelude), CMake (cmake.cmake_text) and the atomic folder swap (writer.write_folder). The kernel
bakes G, total_m, N and K in (the groups' rows come at run time), so the launcher refuses other G or total_m.
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
from .element_types import CONVERSIONS, c_type, type_includes
from .harness import prelude, tolerance_expression
from .header import check_name, launcher_body, split_includes
from .manifest import ExportManifest, Provenance, file_names
from .writer import write_folder

GROUPED_KEY = "grouped"  # kernel.json's field holding the grouped spec (gemmtune.load refuses such folders)


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


def launcher_params(spec: GroupedSpec) -> str:
    """The launcher's parameters, in the order its callers pass them."""
    gemm = spec.as_gemm()
    t_in, t_out = c_type(gemm, "A"), c_type(gemm, "D")
    bias = [f"const {t_out}* bias"] if spec.has_bias else []
    return ", ".join([f"const {t_in}* A", f"const {t_in}* B", f"const int* {spec.rows_operand}", *bias,
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
constexpr const char* epilogue = "{'swiglu' if spec.swiglu else spec.epilogue}";
constexpr const char* arch = "{arch}";
constexpr const char* family = "{family}";
constexpr const char* config = "{config_text}";
}}  // namespace {name}_info
"""


def grouped_header_text(name: str, spec: GroupedSpec, config: GroupedConfig, compiled: CompiledKernel) -> str:
    """The complete ``<name>.cuh``: the kernel in namespace <name>_kernel, <name>_info, the launcher."""
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
// {"bias (G, N), a row per group; " if spec.has_bias else ""}D (total_m, N): rows no group holds are left as they were.
// Generated for exactly groups = {spec.groups}, total_m = {spec.total_m}, N = {spec.n}, K = {spec.k}: other groups or
// total_m return cudaErrorInvalidValue. The group rows are read on the device (a captured graph replays with new
// ones). Persistent grid: {source.grid[0]} blocks (one per SM of the GPU it was exported for; any count is correct).
// Launches asynchronously on `stream`; device pointers 16-byte aligned (cudaMalloc's are).
inline cudaError_t {name}({launcher_params(spec)}) {{
    if (groups != {name}_info::GROUPS || total_m != {name}_info::TOTAL_M) return cudaErrorInvalidValue;
{_counts_alias(spec)}{launcher_body(name, source)}}}
"""


def _counts_alias(spec: GroupedSpec) -> str:
    """The masked launcher's counts under the name of the kernel's group-rows argument (offs in both layouts)."""
    return "    const int* offs = counts;  // the kernel's group-rows argument\n" if spec.masked_layout else ""


def reference_text(spec: GroupedSpec) -> str:
    """``reference.cuh``: one thread per element of D, products summed in double, the epilogue in float."""
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


def harness_text(name: str, spec: GroupedSpec, arch: str) -> str:
    """``main.cu``: checks the kernel against reference.cuh on uneven groups over a NaN-poisoned D (rows no group
    holds must stay NaN), then times it."""
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

int main(int argc, char** argv) {{
    const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
    if (reps < 1) {{
        std::fprintf(stderr, "usage: %s [timed runs >= 1]\\n", argv[0]);
        return 2;
    }}
    namespace info = {name}_info;
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


def readme_text(name: str, spec: GroupedSpec, config: GroupedConfig, arch: str, provenance: Provenance) -> str:
    return f"""# {name}

A grouped GEMM written by gemmtune for {arch}: {spec.groups} groups, total_m = {spec.total_m}, N = {spec.n}, K = {spec.k},
{spec.dtype}, {'SwiGLU' if spec.swiglu else f'epilogue {spec.epilogue}'}, {spec.layout} layout.
Config ({provenance.describe()}): `{json.dumps(config.to_json(), sort_keys=True)}`.

    #include "{name}.cuh"
    cudaError_t err = {name}({launcher_params(spec).replace(' = 0', '')});

The group rows ({spec.rows_operand}) live on the device and may change between calls (or graph replays);
G and total_m must be the ones above. Check on the GPU: `cmake -B build && cmake --build build && ./build/{name}_check`.
Not loadable by `gemmtune.load` (a single-GEMM loader); from Python use gemmtune.torch.grouped_mm.
"""


def grouped_files(name: str, spec: GroupedSpec, config: GroupedConfig, compiled: CompiledKernel,
                  provenance: Provenance) -> dict[str, bytes]:
    """File name -> contents of the export folder (the single-GEMM export's file names)."""
    files = file_names(name)
    manifest = ExportManifest.from_compiled(name, compiled, provenance).to_json()
    manifest[GROUPED_KEY] = {"groups": spec.groups, "total_m": spec.total_m, "n": spec.n, "k": spec.k,
                             "dtype": spec.dtype, "epilogue": str(spec.epilogue), "swiglu": spec.swiglu,
                             "layout": spec.layout, "config": config.to_json()}
    texts = {files["header"]: grouped_header_text(name, spec, config, compiled),
             files["harness"]: harness_text(name, spec, compiled.arch),
             files["reference"]: reference_text(spec),
             files["cmake"]: cmake_text(name, compiled.arch, compiled.source.options, driver_api=True),
             files["readme"]: readme_text(name, spec, config, compiled.arch, provenance),
             files["ptx"]: compiled.ptx,
             files["manifest"]: json.dumps(manifest, indent=1) + "\n",
             files["kernel_source"]: json.dumps(compiled.source.to_json(), indent=1) + "\n"}
    return {**{k: v.encode() for k, v in texts.items()}, files["cubin"]: compiled.cubin}


def export_grouped(spec: GroupedSpec, config: GroupedConfig, out: Path, arch: str = "sm_90a", name: str | None = None,
                   sm_count: int | None = None, provenance: Provenance | None = None,
                   cache_dir: Path | None = None) -> GroupedExport:
    """Render `spec` with `config` on a grid of `sm_count` blocks (None: the sm_90a table's SMs), compile with
    NVRTC and write the folder `out` atomically."""
    if arch != "sm_90a":
        check_arch(arch)
        raise SpecError(f"grouped GEMM kernels use wgmma and TMA: export them for sm_90a, not {arch}")
    if spec.fp8:
        raise SpecError("export of fp8 grouped GEMMs is not built yet (the launcher would take the scales); "
                        "use bf16 or fp16")
    compiled = compile_kernel(render(spec, config, sm_count), arch, cache_dir)
    name = check_name(name or default_name(spec), compiled.source)
    provenance = provenance or Provenance("given", "grouped config passed in directly")
    write_folder(Path(out), grouped_files(name, spec, config, compiled, provenance))
    return GroupedExport(Path(out), name, spec, config, compiled, provenance)
