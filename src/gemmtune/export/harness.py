"""``main.cu``: a self-checking benchmark for an exported kernel.

It fills the inputs with fixed-seed random values in [-1, 1) rounded to each operand's storage type
(fp32, __half, __nv_bfloat16), poisons D with NaN, runs the tuned kernel and the reference
(``reference.cuh``: products of the same stored values summed in double, rounded to D's type once; a gated
spec's gate and up sums, then SwiGLU in double),
compares, and only when the check passes times the kernel with CUDA events. Exit code 0 means correct.
"""
from __future__ import annotations

from ..epilogue import Operand
from ..spec import GemmSpec
from .cmake import nvcc_arch_flag
from .element_types import CONVERSIONS, c_type, uses_16_bit
from .gated import b_elements

SCALAR_VALUES = {"alpha": "0.75f", "beta": "-0.5f"}  # not 1 and 0, so a dropped scalar shows
ERROR_SCALE = 8  # tolerance = ERROR_SCALE · FLT_EPSILON · sqrt(K) + rounding: fp32 sums drift like a random walk
# D and the reference are each rounded to D's type once: they may differ by one ulp, 2·unit roundoff.
OUTPUT_ROUNDING = {"fp32": "0.0", "fp16": "2.0 * 0x1p-11", "bf16": "2.0 * 0x1p-8"}
# tf32 tensor cores cut each fp32 input to a 10-bit mantissa; the reference multiplies the fp32 values.
INPUT_ROUNDING = {"fp32": "0.0", "tf32": "4.0 * 0x1p-10", "fp16": "0.0", "bf16": "0.0"}

PRELUDE = r"""#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
{type_headers}
// Stop with the error's name and line on any failed CUDA call.
#define CHECK_CUDA(call)                                                                      \
    do {                                                                                      \
        cudaError_t err_ = (call);                                                            \
        if (err_ != cudaSuccess) {                                                            \
            std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_),      \
                         __FILE__, __LINE__, cudaGetErrorString(err_));                       \
            std::exit(2);                                                                     \
        }                                                                                     \
    } while (0)

namespace {

{conversions}
// Uniform values in [-1, 1) from a fixed-seed xorshift generator: every run sees the same inputs.
std::vector<float> random_values(size_t count, uint32_t seed) {
    std::vector<float> values(count);
    uint32_t state = seed * 2654435761u + 1u;
    for (float& v : values) {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        v = (float)(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
    return values;
}

// A device buffer holding `count` random values, rounded to T (the kernel and the reference read
// the same stored values).
template <class T>
T* random_device_buffer(size_t count, uint32_t seed) {
    const std::vector<float> values = random_values(count, seed);
    std::vector<T> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = from_float<T>(values[i]);
    T* device = nullptr;
    CHECK_CUDA(cudaMalloc(&device, count * sizeof(T)));
    CHECK_CUDA(cudaMemcpy(device, host.data(), count * sizeof(T), cudaMemcpyHostToDevice));
    return device;
}

// `count` elements of type T copied back and widened to float.
template <class T>
std::vector<float> to_host(const T* device, size_t count) {
    std::vector<T> stored(count);
    CHECK_CUDA(cudaMemcpy(stored.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = to_float(stored[i]);
    return host;
}

struct Check {
    double rel_error;   // max |D - R| / max |R|
    size_t non_finite;  // NaN or inf in D: unwritten (still poisoned) or broken elements
};

Check compare(const std::vector<float>& d, const std::vector<float>& r) {
    double max_diff = 0.0, max_ref = 0.0;
    size_t non_finite = 0;
    for (size_t i = 0; i < d.size(); ++i) {
        if (!std::isfinite(d[i])) { ++non_finite; continue; }
        max_diff = std::max(max_diff, std::fabs((double)d[i] - (double)r[i]));
        max_ref = std::max(max_ref, std::fabs((double)r[i]));
    }
    return Check{max_diff / std::max(max_ref, 1e-30), non_finite};
}

// Median time of `reps` single launches, each between two CUDA events, after 3 warm-up launches.
template <class Launch>
float median_ms(Launch launch, int reps) {
    cudaEvent_t start, stop;
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&stop));
    for (int i = 0; i < 3; ++i) CHECK_CUDA(launch());
    std::vector<float> times(reps);
    for (float& ms : times) {
        CHECK_CUDA(cudaEventRecord(start));
        CHECK_CUDA(launch());
        CHECK_CUDA(cudaEventRecord(stop));
        CHECK_CUDA(cudaEventSynchronize(stop));
        CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    }
    CHECK_CUDA(cudaEventDestroy(start));
    CHECK_CUDA(cudaEventDestroy(stop));
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

}  // namespace
"""


# fp32-only harnesses need no CUDA half-precision headers (which pull in CCCL's <nv/target>).
FLOAT_CONVERSIONS = r"""// float <-> storage type (every operand is fp32 here).
inline float to_float(float x) { return x; }
template <class T> inline T from_float(float v) { return v; }
"""


def prelude(spec: GemmSpec) -> str:
    """PRELUDE with the element-type headers and conversions `spec` needs."""
    wide = uses_16_bit(spec)
    headers = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" if wide else ""
    return PRELUDE.replace("{type_headers}\n", headers).replace("{conversions}", CONVERSIONS if wide else FLOAT_CONVERSIONS)


def _elements(operand: Operand, spec: GemmSpec) -> str:
    return {"matrix": "(size_t)M * N", "row": "(size_t)M", "col": "(size_t)N"}[operand.kind]


def _random_buffer(spec: GemmSpec, name: str, count: str, seed: int) -> str:
    t = c_type(spec, name)
    return f"    {t}* {name} = random_device_buffer<{t}>({count}, {seed});"


def _inputs(spec: GemmSpec) -> str:
    """Declarations of A, B and the epilogue operands, each with its own seed, in its storage type."""
    lines = [_random_buffer(spec, "A", "(size_t)M * K", 1) + f"  // stored {spec.a_shape[0]}×{spec.a_shape[1]}",
             _random_buffer(spec, "B", b_elements(spec), 2) + f"  // stored {spec.b_shape[0]}×{spec.b_shape[1]}"
             + (" (gate and up rows interleaved by 8)" if spec.gated else "")]
    for seed, operand in enumerate(spec.epilogue.operands(), start=3):
        if operand.kind == "scalar":
            lines.append(f"    const float {operand.name} = {SCALAR_VALUES[operand.name]};")
        else:
            lines.append(_random_buffer(spec, operand.name, _elements(operand, spec), seed))
    return "\n".join(lines)


def tolerance_expression(spec: GemmSpec) -> str:
    """C++ expression of the harness's tolerance on max|D − R| / max|R| (see the module docstring)."""
    extra = [x for x in (INPUT_ROUNDING[spec.dtype], OUTPUT_ROUNDING[spec.out_dtype]) if x != "0.0"]
    return " + ".join([f"{ERROR_SCALE} * FLT_EPSILON * std::sqrt((double)K)", *extra])


def _frees(spec: GemmSpec) -> str:
    pointers = ["A", "B", *(op.name for op in spec.epilogue.operands() if op.kind != "scalar"), "D", "R"]
    return "\n".join(f"    CHECK_CUDA(cudaFree({p}));" for p in pointers)


def call_arguments(spec: GemmSpec, output: str) -> str:
    return ", ".join(["A", "B", *(op.name for op in spec.epilogue.operands()), output])


def main_opening(name: str) -> str:
    """main.cu's main() up to the exported kernel's info namespace: the timed-runs argument, checked (every
    harness gemmtune writes starts so)."""
    return f"""int main(int argc, char** argv) {{
    const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
    if (reps < 1) {{
        std::fprintf(stderr, "usage: %s [timed runs >= 1]\\n", argv[0]);
        return 2;
    }}
    namespace info = {name}_info;"""


def harness_text(name: str, spec: GemmSpec, arch: str, driver_api: bool = False) -> str:
    """The complete ``main.cu`` for the exported kernel `name` (driver_api: the launcher calls the
    driver, so a plain nvcc build links -lcuda)."""
    kernel_args, reference_args = call_arguments(spec, "D"), call_arguments(spec, "R")
    driver = " -lcuda" if driver_api else ""
    return f"""// main.cu — written by gemmtune: checks {name} against a reference on this GPU, then times it.
// Build: cmake -B build && cmake --build build   (or: nvcc -O3 -std=c++17 {nvcc_arch_flag(arch)} -o {name}_check main.cu{driver})
// Run:   ./{name}_check [timed runs, default 20]; exit code 0 = correct, 1 = wrong result, 2 = CUDA error.
{prelude(spec)}
#include "{name}.cuh"
#include "reference.cuh"

{main_opening(name)}
    constexpr int M = info::M, N = info::N, K = info::K;
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    std::printf("{name}: M=%d N=%d K=%d layout=%s epilogue=%s%s built for %s, running on %s (sm_%d%d)\\n", M, N, K,
                info::layout, info::epilogue, info::gated ? " gated (SwiGLU)" : "", info::arch, prop.name, prop.major,
                prop.minor);

{_inputs(spec)}
    using out_t = {c_type(spec, "D")};
    out_t* D = nullptr;  // the tuned kernel's output
    out_t* R = nullptr;  // the reference's output
    CHECK_CUDA(cudaMalloc(&D, (size_t)M * N * sizeof(out_t)));
    CHECK_CUDA(cudaMalloc(&R, (size_t)M * N * sizeof(out_t)));
    // Poison D with NaN (all bits set: a NaN in fp32, fp16 and bf16) so an unwritten element fails the check.
    CHECK_CUDA(cudaMemset(D, 0xFF, (size_t)M * N * sizeof(out_t)));

    CHECK_CUDA({name}({kernel_args}));
    CHECK_CUDA(gemmtune_reference::launch({reference_args}, 0));
    CHECK_CUDA(cudaDeviceSynchronize());

    // fp32 accumulation error grows like sqrt(K) relative to the size of the result; 16-bit outputs
    // add one ulp of D's type, tf32 the rounding of its inputs.
    const double tolerance = {tolerance_expression(spec)};
    const Check check = compare(to_host(D, (size_t)M * N), to_host(R, (size_t)M * N));
    const bool ok = check.non_finite == 0 && check.rel_error <= tolerance;
    std::printf("check: rel_error=%.3e tolerance=%.3e non_finite=%zu %s\\n", check.rel_error, tolerance,
                check.non_finite, ok ? "PASS" : "FAIL");
    if (ok) {{  // never time a wrong kernel
        const float ms = median_ms([&] {{ return {name}({kernel_args}); }}, reps);
        std::printf("time: %.4f ms (median of %d runs), %.2f TFLOP/s\\n", ms, reps,
                    info::flops / (ms * 1e-3) / 1e12);
    }}
{_frees(spec)}
    return ok ? 0 : 1;
}}
"""
