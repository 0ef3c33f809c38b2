"""The fp8 pieces of a grouped export (issue 70): the scales' shapes in words, and the harness (main.cu) with its
host reference (reference.cuh) of the dequantized operands.

The harness draws fp8 codes on the host (normal values of magnitude 1/8 to about 8, both signs; never NaN) and
float32 scales in [0.5, 1.5), runs the launcher over a NaN-poisoned D on uneven groups, and checks on the host:
every row a group holds is finite, every other row still NaN, and the first and last SAMPLE_ROWS rows of up to
SAMPLE_GROUPS groups against a float64 product of the dequantized operands (code value x its scale), the epilogue
in float, within bf16's tolerance (what tests/test_fp8_grouped.py allows: the fp8 values are exact, what differs
is the fp32 sums and D's rounding).
"""
from __future__ import annotations

from ..fp8 import FORMATS
from ..grouped.spec import GroupedSpec
from ..spec import GemmSpec
from .cmake import nvcc_arch_flag
from .element_types import c_type
from .harness import main_opening, prelude, tolerance_expression

SAMPLE_GROUPS = 8  # groups whose rows the host reference checks
SAMPLE_ROWS = 4  # of each: its first and last rows
FP8_C_TYPE = "unsigned char"  # fp8 codes as the kernel reads them (torch.float8_e4m3fn / float8_e5m2's bytes)
# exponent fields of the codes the harness draws: values 2^-3 .. just under 2^3 in either format
DRAWN_EXPONENTS = {"e4m3": (4, 9), "e5m2": (12, 17)}


def scales_comment(spec: GroupedSpec) -> str:
    """The launcher's scale_a / scale_b in words: shapes for spec.scaling, float32, on the device."""
    if spec.scaling == "tensor":
        return "scale_a (1,) and scale_b (1,) float32: one scale each (per tensor)"
    if spec.scaling == "rowwise":
        return ("scale_a (total_m,) float32, one a row of A; scale_b (G, N) float32, one a column of each group's "
                "B (a row of its stored weights)")
    return ("scale_a (total_m, ceil(K/128)) float32, one for each 128 values of K of a row of A; scale_b "
            "(G, ceil(N/128), ceil(K/128)) float32, one for each 128x128 block of a group's weights stored (N, K); "
            "row-major")


def scale_counts(spec: GroupedSpec) -> tuple[str, str]:
    """C++ expressions of scale_a's and scale_b's element counts (over main.cu's constants)."""
    return {"tensor": ("1", "1"), "rowwise": ("(size_t)TOTAL_M", "(size_t)G * N"),
            "block": ("(size_t)TOTAL_M * KB", "(size_t)G * NB * KB")}[spec.scaling]


def _scale_of(spec: GroupedSpec) -> str:
    a = {"tensor": "scale_a[0]", "rowwise": "scale_a[row]", "block": "scale_a[(size_t)row * KB + p / 128]"}
    b = {"tensor": "scale_b[0]", "rowwise": "scale_b[(size_t)g * N + col]",
         "block": "scale_b[((size_t)g * NB + col / 128) * KB + p / 128]"}
    return f"""// The scales of A's (row, p) and of group g's B at (p, col), as the kernel reads them ({spec.scaling}).
inline double scale_of_a(const float* scale_a, int row, int p) {{ (void)p; return {a[spec.scaling]}; }}
inline double scale_of_b(const float* scale_b, int g, int col, int p) {{ (void)g; (void)col; (void)p; return {b[spec.scaling]}; }}
"""


def reference_text(spec: GroupedSpec) -> str:
    """``reference.cuh`` of an fp8 export: fp8 decoding and one element of D on the host, in float64."""
    fmt = FORMATS[spec.dtype]
    nan_rule = ("exponent == TOP && mantissa == MANTISSA_MASK" if spec.dtype == "e4m3" else "exponent == TOP")
    bias = ", const float* bias" if spec.has_bias else ""
    bias_view = "    const HostRow bias_row{bias + (size_t)g * N};\n" if spec.has_bias else ""
    statements = "".join(f"    {s}\n" for s in spec.epilogue.cuda_statements("row", "col", "N")).replace("bias[", "bias_row[")
    preamble = spec.epilogue.cuda_preamble().replace("__device__ __forceinline__", "inline")
    return f"""// Host reference of the fp8 grouped GEMM main.cu checks: the dequantized operands (each code's value times its
// scale) multiplied in double, the epilogue in float. Written by gemmtune; slow on purpose (main.cu samples rows).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>

namespace gemmtune_reference {{
constexpr int GROUPS = {spec.groups}, TOTAL_M = {spec.total_m}, N = {spec.n}, K = {spec.k};
constexpr int KB = (K + 127) / 128, NB = (N + 127) / 128;  // 128-value blocks along K and N (block scales)
constexpr int CAPACITY = {spec.capacity if spec.masked_layout else 0};  // masked layout: rows each group owns

// {spec.dtype}: {fmt.exponent_bits} exponent bits (bias {fmt.bias}), {fmt.mantissa_bits} mantissa bits.
constexpr int MANTISSA_BITS = {fmt.mantissa_bits}, MANTISSA_MASK = (1 << MANTISSA_BITS) - 1;
constexpr int TOP = (1 << {fmt.exponent_bits}) - 1, BIAS = {fmt.bias};
inline double fp8_value(unsigned char code) {{
    const double sign = (code & 0x80) ? -1.0 : 1.0;
    const int exponent = (code >> MANTISSA_BITS) & TOP, mantissa = code & MANTISSA_MASK;
    if ({nan_rule}) return NAN;  // NaN (and e5m2's infinities: never drawn)
    if (exponent == 0) return sign * std::ldexp((double)mantissa, 1 - BIAS - MANTISSA_BITS);  // subnormal
    return sign * std::ldexp(1.0 + (double)mantissa / (1 << MANTISSA_BITS), exponent - BIAS);
}}

{_scale_of(spec)}
struct HostRow {{
    const float* p;
    float operator[](size_t i) const {{ return p[i]; }}
}};
{preamble}
// The group holding `row` ({'masked: row / CAPACITY, within its count' if spec.masked_layout else 'ends clamped to [0, TOTAL_M] as the kernel does'}), or -1.
inline int group_of(const int* rows_in, int row) {{
{_group_of_body(spec)}}}

// D[row, col] of group g: A (TOTAL_M, K) codes, B (G, N, K) codes (each group's weights stored (N, K)).
inline float value(const unsigned char* A, const unsigned char* B, const float* scale_a, const float* scale_b{bias},
                   int g, int row, int col) {{
    double acc = 0.0;
    for (int p = 0; p < K; ++p)
        acc += fp8_value(A[(size_t)row * K + p]) * scale_of_a(scale_a, row, p) *
               fp8_value(B[((size_t)g * N + col) * K + p]) * scale_of_b(scale_b, g, col, p);
{bias_view}    float v = (float)acc;
{statements}    return v;
}}
}}  // namespace gemmtune_reference
"""


def _group_of_body(spec: GroupedSpec) -> str:
    if spec.masked_layout:
        return ("    const int g = row / CAPACITY;\n"
                "    return row - g * CAPACITY < std::min(std::max(rows_in[g], 0), CAPACITY) ? g : -1;\n")
    return ("    for (int g = 0; g < GROUPS; ++g)\n"
            "        if (row < std::min(std::max(rows_in[g], 0), TOTAL_M)) return g;\n    return -1;\n")


def bf16_twin(gemm: GemmSpec) -> GemmSpec:
    """The bf16 GEMM of `gemm`'s shape, whose tolerance every fp8 check takes whatever D's type (fp32 D too: the
    fp8 values are exact in the reference, what differs is wgmma's sums, the same for every D)."""
    return GemmSpec(gemm.m, gemm.n, gemm.k, gemm.layout, "bf16", gemm.epilogue)


def harness_text(name: str, spec: GroupedSpec, arch: str, rows: list[int], one_gemm: bool = False) -> str:
    """``main.cu`` of an fp8 export (the module docstring says what it checks); one_gemm: through the one-GEMM
    launcher (no group rows)."""
    gemm = spec.as_gemm()
    t_out = c_type(gemm, "D")
    low, high = DRAWN_EXPONENTS[spec.dtype]
    count_a, count_b = scale_counts(spec)
    bias_decl = (f"    {t_out}* bias = random_device_buffer<{t_out}>((size_t)G * N, 3);\n"
                 f"    const std::vector<float> bias_host = to_host(bias, (size_t)G * N);\n" if spec.has_bias else "")
    bias_arg, bias_host = (", bias", ", bias_host.data()") if spec.has_bias else ("", "")
    first = ("g * info::CAPACITY" if spec.masked_layout else "g == 0 ? 0 : std::min(std::max(rows_host[g - 1], 0), TOTAL_M)")
    last = ("g * info::CAPACITY + std::min(std::max(rows_host[g], 0), info::CAPACITY)" if spec.masked_layout
            else "std::max(std::min(std::max(rows_host[g], 0), TOTAL_M), begin)")
    call = (f"{name}(A, B{bias_arg}, scale_a, scale_b, D, 0)" if one_gemm
            else f"{name}(A, B, rows_in{bias_arg}, scale_a, scale_b, D, G, TOTAL_M, 0)")
    frees = ["rows_in", "A", "B", "scale_a", "scale_b", *(["bias"] if spec.has_bias else []), "D"]
    return f"""// main.cu — written by gemmtune: checks {name} ({spec.dtype} x {spec.dtype} -> {spec.out_dtype}, {spec.scaling} scales)
// against a host reference of the dequantized operands on this GPU, then times it.
// Build: cmake -B build && cmake --build build   (or: nvcc -O3 -std=c++17 {nvcc_arch_flag(arch)} -o {name}_check main.cu -lcuda)
// Run:   ./{name}_check [timed runs, default 20]; exit code 0 = correct, 1 = wrong result, 2 = CUDA error.
{prelude(gemm)}
#include "{name}.cuh"
#include "reference.cuh"

namespace {{
// fp8 codes of normal values (exponent fields {low}..{high}, both signs; never NaN), from a fixed-seed xorshift.
std::vector<unsigned char> random_codes(size_t count, uint32_t seed) {{
    std::vector<unsigned char> codes(count);
    uint32_t state = seed * 2654435761u + 1u;
    for (unsigned char& c : codes) {{
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        const uint32_t exponent = {low} + (state >> 8) % {high - low + 1};
        c = (unsigned char)(((state >> 4) & 1u) << 7 | exponent << gemmtune_reference::MANTISSA_BITS |
                            (state & gemmtune_reference::MANTISSA_MASK));
    }}
    return codes;
}}

template <class T>
T* device_copy(const std::vector<T>& host) {{
    T* device = nullptr;
    CHECK_CUDA(cudaMalloc(&device, host.size() * sizeof(T)));
    CHECK_CUDA(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return device;
}}

std::vector<float> random_scales(size_t count, uint32_t seed) {{  // float32 scales in [0.5, 1.5)
    std::vector<float> scales = random_values(count, seed);
    for (float& s : scales) s = 1.0f + 0.5f * s;
    return scales;
}}
}}  // namespace

{main_opening(name)}
    using gemmtune_reference::KB;
    using gemmtune_reference::NB;
    constexpr int G = info::GROUPS, TOTAL_M = info::TOTAL_M, N = info::N, K = info::K;
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    std::printf("{name}: G=%d total_m=%d N=%d K=%d %s -> %s, %s scales, layout=%s epilogue=%s built for %s, "
                "running on %s (sm_%d%d)\\n", G, TOTAL_M, N, K, info::dtype, info::out_dtype, info::scaling, info::layout,
                info::epilogue, info::arch, prop.name, prop.major, prop.minor);
    (void)KB;
    (void)NB;

    // Uneven groups ({'counts' if spec.masked_layout else 'cumulative ends'}), on the device as the kernel reads them.
    const std::vector<int> rows_host = {{{", ".join(str(r) for r in rows)}}};
    int* rows_in = device_copy(rows_host);
    const std::vector<unsigned char> a_host = random_codes((size_t)TOTAL_M * K, 1), b_host = random_codes((size_t)G * N * K, 2);
    const std::vector<float> sa_host = random_scales({count_a}, 4), sb_host = random_scales({count_b}, 5);
    unsigned char* A = device_copy(a_host);
    unsigned char* B = device_copy(b_host);
    float* scale_a = device_copy(sa_host);
    float* scale_b = device_copy(sb_host);
{bias_decl}    {t_out}* D = nullptr;
    CHECK_CUDA(cudaMalloc(&D, (size_t)TOTAL_M * N * sizeof({t_out})));
    CHECK_CUDA(cudaMemset(D, 0xFF, (size_t)TOTAL_M * N * sizeof({t_out})));  // NaN: rows no group holds stay so

    CHECK_CUDA({call});
    CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> d = to_host(D, (size_t)TOTAL_M * N);

    // Every row: finite where a group holds it, NaN elsewhere. Sampled rows: against the host reference.
    size_t stray = 0, unwritten = 0;
    for (int row = 0; row < TOTAL_M; ++row) {{
        const bool held = gemmtune_reference::group_of(rows_host.data(), row) >= 0;
        for (int col = 0; col < N; ++col) {{
            const float v = d[(size_t)row * N + col];
            stray += !held && !std::isnan(v);
            unwritten += held && !std::isfinite(v);
        }}
    }}
    std::vector<float> held_d, held_r;
    const int stride = G > {SAMPLE_GROUPS} ? G / {SAMPLE_GROUPS} : 1;
    for (int g = stride - 1; g < G; g += stride) {{
        const int begin = {first};
        const int end = {last};
        for (int row = begin; row < end; ++row) {{
            if (row >= begin + {SAMPLE_ROWS} && row < end - {SAMPLE_ROWS}) continue;
            for (int col = 0; col < N; ++col) {{
                held_d.push_back(d[(size_t)row * N + col]);
                held_r.push_back(gemmtune_reference::value(a_host.data(), b_host.data(), sa_host.data(), sb_host.data(){bias_host},
                                                           g, row, col));
            }}
        }}
    }}
    const double tolerance = {tolerance_expression(bf16_twin(gemm))};  // bf16's: the fp8 values are exact in the reference
    const Check check = compare(held_d, held_r);
    const bool ok = check.non_finite == 0 && unwritten == 0 && stray == 0 && check.rel_error <= tolerance;
    std::printf("check: %zu sampled values, rel_error=%.3e tolerance=%.3e non_finite=%zu unwritten=%zu "
                "written_outside_groups=%zu %s\\n", held_d.size(), check.rel_error, tolerance, check.non_finite,
                unwritten, stray, ok ? "PASS" : "FAIL");
    if (ok) {{  // never time a wrong kernel
        const float ms = median_ms([&] {{ return {call}; }}, reps);
        size_t held_rows = 0;
        for (int row = 0; row < TOTAL_M; ++row) held_rows += gemmtune_reference::group_of(rows_host.data(), row) >= 0;
        const double flops = 2.0 * (double)held_rows * N * K;
        std::printf("time: %.4f ms (median of %d runs), %.2f TFLOP/s\\n", ms, reps, flops / (ms * 1e-3) / 1e12);
    }}
{"".join(f"    CHECK_CUDA(cudaFree({p}));{chr(10)}" for p in frees)}    return ok ? 0 : 1;
}}
"""
