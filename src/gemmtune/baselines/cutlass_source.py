"""CUTLASS C++ for one GEMM spec: the kernels CUTLASS's own generator would offer, as text (no GPU, no nvcc).

Two kinds of candidate, each rendered into a small translation unit with a C interface
(``gemmtune_cutlass_prepare/run/release``) that nvcc builds into a shared library:

- ``sm90``: CUTLASS 3.x CollectiveBuilder kernels for Hopper tensor cores (fp16, bf16 inputs): TMA
  loads, wgmma, warp-specialized cooperative or ping-pong schedules, thread-block clusters. The
  epilogue chain becomes an Epilogue Visitor Tree (EVT) where every op has a CUTLASS node
  (relu, gelu, add); otherwise the kernel is the GEMM alone and says so (``fused`` False).
- ``simt``: CUTLASS 2.x ``device::Gemm`` on CUDA cores for fp32 (fp32 products, no TF32), the tile
  shapes of CUTLASS's ``GenerateSM80_Simt_f32``; epilogue not fused.

Tile, cluster and schedule choices follow CUTLASS's generator (``cutlass_library/generator.py``,
``sm90_shapes.py``) at its default levels, cut to the few that suit large square GEMMs, so that a
search is minutes of nvcc rather than hours. The profiler's rule is kept: build each, run each,
keep the fastest (baselines/cutlass.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..spec import GemmSpec

# CUTLASS element type of each gemmtune storage type.
ELEMENTS = {"fp32": "float", "fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}
ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


@dataclass(frozen=True, order=True)
class CutlassCandidate:
    kind: str  # "sm90" (CollectiveBuilder, tensor cores) or "simt" (2.x CUDA-core GEMM)
    tile: tuple[int, int, int]  # thread-block tile M, N, K
    cluster: tuple[int, int, int] = (1, 1, 1)  # sm90: thread blocks per cluster
    schedule: str = ""  # sm90: cooperative or pingpong
    warps: tuple[int, int, int] = (1, 1, 1)  # simt: warps per tile along M, N, K
    stages: int = 0  # simt: shared-memory stages (sm90: as many as fit, the builder's auto count)

    def describe(self) -> str:
        tile = "x".join(map(str, self.tile))
        if self.kind == "sm90":
            return f"sm90 {tile} cluster {'x'.join(map(str, self.cluster))} {self.schedule}"
        return f"simt {tile} warps {'x'.join(map(str, self.warps))} stages {self.stages}"


def _sm90(tile: tuple[int, int, int], cluster: tuple[int, int, int], schedule: str) -> CutlassCandidate:
    return CutlassCandidate("sm90", tile, cluster, schedule)


# 16-bit WGMMA GEMMs: multipliers (2,1,4), (4,1,4), (1,1,4) of the 64xNx16 instruction with N in
# {128, 256}, clusters 1x2 / 2x1 (level 1) and the two warp-specialized schedules.
SM90_16BIT = (
    _sm90((128, 256, 64), (1, 2, 1), "cooperative"),
    _sm90((128, 256, 64), (2, 1, 1), "cooperative"),
    _sm90((256, 128, 64), (1, 2, 1), "cooperative"),
    _sm90((256, 128, 64), (2, 1, 1), "cooperative"),
    _sm90((128, 128, 64), (1, 2, 1), "cooperative"),
    _sm90((128, 128, 64), (2, 1, 1), "cooperative"),
    _sm90((64, 256, 64), (1, 2, 1), "pingpong"),
    _sm90((128, 128, 64), (1, 2, 1), "pingpong"),
)
# fp32 SIMT: the first tiles of CUTLASS's GenerateSM80_Simt_f32 list (4 and 5 stages).
SIMT_FP32 = (
    CutlassCandidate("simt", (256, 128, 8), warps=(4, 2, 1), stages=5),
    CutlassCandidate("simt", (128, 256, 8), warps=(2, 4, 1), stages=5),
    CutlassCandidate("simt", (128, 128, 8), warps=(4, 2, 1), stages=5),
    CutlassCandidate("simt", (256, 128, 8), warps=(4, 2, 1), stages=4),
    CutlassCandidate("simt", (128, 128, 8), warps=(4, 2, 1), stages=4),
    CutlassCandidate("simt", (64, 128, 8), warps=(2, 2, 1), stages=5),
)

EVT_OPS = ("relu", "gelu", "add")  # epilogue ops with a CUTLASS EVT node here


def candidates(spec: GemmSpec, arch: str) -> tuple[CutlassCandidate, ...]:
    """The kernels to build and race for `spec` on `arch`, or ConfigError with the reason."""
    if spec.dtype == "fp32":
        return SIMT_FP32
    if spec.dtype in ("fp16", "bf16"):
        if not arch.startswith("sm_90"):
            raise ConfigError(f"the CUTLASS baseline builds {spec.dtype} kernels for sm_90 only, not {arch}")
        return SM90_16BIT
    raise ConfigError(f"the CUTLASS baseline has no {spec.dtype} kernels (fp32, fp16 and bf16 only)")


def fuses(spec: GemmSpec, candidate: CutlassCandidate) -> bool:
    """Whether the kernel applies the spec's epilogue (else it is the GEMM alone)."""
    ops = spec.epilogue.ops
    return candidate.kind == "sm90" and bool(ops) and all(op in EVT_OPS for op in ops)


def _alignment(spec: GemmSpec, operand: str, extent: int) -> int:
    """Elements per vector access: 16 bytes when every row start is 16-byte aligned, else CUTLASS refuses."""
    per_vector = 16 // ELEMENT_BYTES[spec.storage_dtype(operand)]
    if extent % per_vector:
        raise ConfigError(f"CUTLASS's TMA kernels need rows of {operand} in multiples of 16 bytes "
                          f"({extent} elements of {spec.storage_dtype(operand)} is not)")
    return per_vector


# Row-major storage in gemmtune terms; CUTLASS sees A as M×K and B as K×N.
def _layouts(spec: GemmSpec) -> tuple[str, str]:
    a = "cutlass::layout::ColumnMajor" if spec.a_trans else "cutlass::layout::RowMajor"
    b = "cutlass::layout::ColumnMajor" if spec.b_trans else "cutlass::layout::RowMajor"
    return a, b


def render(spec: GemmSpec, candidate: CutlassCandidate) -> str:
    """The whole translation unit for one candidate."""
    body = _render_sm90(spec, candidate) if candidate.kind == "sm90" else _render_simt(spec, candidate)
    return f"// gemmtune CUTLASS baseline: {spec.short()} | {candidate.describe()}\n{body}{C_INTERFACE}"


# --- sm90: CollectiveBuilder ------------------------------------------------------------------
SM90_HEADERS = """#include <cuda_runtime.h>
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
"""
# Mainloop and epilogue schedules of each warp-specialized kernel schedule.
SM90_SCHEDULES = {
    "cooperative": ("cutlass::gemm::KernelTmaWarpSpecializedCooperative",
                    "cutlass::epilogue::TmaWarpSpecializedCooperative"),
    "pingpong": ("cutlass::gemm::KernelTmaWarpSpecializedPingpong", "cutlass::epilogue::TmaWarpSpecialized"),
}
RN = "cutlass::FloatRoundStyle::round_to_nearest"
# EVT compute node of each unary op (the functor's template applies per element and per fragment).
EVT_UNARY = {"relu": "cutlass::epilogue::thread::ReLu", "gelu": "cutlass::epilogue::thread::GELU_taylor"}


def evt(ops: tuple[str, ...], element_d: str) -> tuple[str, str]:
    """The Epilogue Visitor Tree for an op chain applied left to right to the accumulator, and the
    brace-initializer of its arguments. Intermediate nodes compute and return float; the last
    returns D's element type, so D is rounded once."""
    tree, args = "cutlass::epilogue::fusion::Sm90AccFetch", "{}"
    for index, op in enumerate(ops):
        out = element_d if index == len(ops) - 1 else "float"
        if op == "add":
            compute = f"cutlass::epilogue::fusion::Sm90Compute<cutlass::plus, {out}, float, {RN}>"
            tree = f"cutlass::epilogue::fusion::Sm90EVT<{compute},\n    {tree},\n    cutlass::epilogue::fusion::Sm90SrcFetch<ElementC>>"
            args = f"{{{args}, {{}}, {{}}}}"
        else:
            compute = f"cutlass::epilogue::fusion::Sm90Compute<{EVT_UNARY[op]}, {out}, float, {RN}>"
            tree = f"cutlass::epilogue::fusion::Sm90EVT<{compute},\n    {tree}>"
            args = f"{{{args}, {{}}}}"
    return tree, args


def _sm90_types(spec: GemmSpec, fused: bool) -> str:
    element_in, element_d = ELEMENTS[spec.dtype], ELEMENTS[spec.out_dtype]
    layout_a, layout_b = _layouts(spec)
    align_a = _alignment(spec, "A", spec.m if spec.a_trans else spec.k)
    align_b = _alignment(spec, "B", spec.k if spec.b_trans else spec.n)
    align_d = _alignment(spec, "D", spec.n)
    reads_c = fused and spec.epilogue.reads_c
    return f"""
using ElementA = {element_in};
using ElementB = {element_in};
using ElementD = {element_d};
using ElementC = {element_d if reads_c else "void"};  // void: C is never read
using LayoutA = {layout_a};
using LayoutB = {layout_b};
using LayoutC = cutlass::layout::RowMajor;
constexpr int AlignmentA = {align_a}, AlignmentB = {align_b}, AlignmentD = {align_d};
"""


def _render_sm90(spec: GemmSpec, c: CutlassCandidate) -> str:
    fused = fuses(spec, c)
    mainloop, epilogue = SM90_SCHEDULES[c.schedule]
    if fused:
        tree, tree_args = evt(spec.epilogue.ops, "ElementD")
        fusion = f"using FusionOp = {tree};\n"
        thread_args = f"  args.epilogue.thread = {tree_args};\n"
    else:
        fusion = "using FusionOp = cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementC, float>;\n"
        thread_args = "  args.epilogue.thread.alpha = 1.0f;\n  args.epilogue.thread.beta = 0.0f;\n"
    shape = lambda t: f"cute::Shape<cute::_{t[0]}, cute::_{t[1]}, cute::_{t[2]}>"  # noqa: E731
    return SM90_HEADERS + _sm90_types(spec, fused) + fusion + f"""using TileShape = {shape(c.tile)};
using ClusterShape = {shape(c.cluster)};

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    ElementC, LayoutC, AlignmentD, ElementD, LayoutC, AlignmentD,
    {epilogue}, FusionOp>::CollectiveOp;

// As many mainloop stages as fit beside the epilogue's shared memory.
using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    ElementA, LayoutA, AlignmentA, ElementB, LayoutB, AlignmentB, float,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    {mainloop}>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    cute::Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

static Gemm::Arguments make_arguments(const void* A, const void* B, const void* C, void* D, int M, int N, int K) {{
  auto stride_a = cutlass::make_cute_packed_stride(typename GemmKernel::StrideA{{}}, cute::make_shape(M, K, 1));
  auto stride_b = cutlass::make_cute_packed_stride(typename GemmKernel::StrideB{{}}, cute::make_shape(N, K, 1));
  auto stride_c = cutlass::make_cute_packed_stride(typename GemmKernel::StrideC{{}}, cute::make_shape(M, N, 1));
  auto stride_d = cutlass::make_cute_packed_stride(typename GemmKernel::StrideD{{}}, cute::make_shape(M, N, 1));
  int device = 0;
  cudaGetDevice(&device);
  Gemm::Arguments args{{
      cutlass::gemm::GemmUniversalMode::kGemm, {{M, N, K, 1}},
      {{static_cast<const ElementA*>(A), stride_a, static_cast<const ElementB*>(B), stride_b}},
      {{{{}}, static_cast<const typename Gemm::ElementC*>(C), stride_c, static_cast<ElementD*>(D), stride_d}}}};
{thread_args}  args.hw_info.device_id = device;
  args.hw_info.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  return args;
}}
"""


# --- simt: CUTLASS 2.x device::Gemm -----------------------------------------------------------
def _render_simt(spec: GemmSpec, c: CutlassCandidate) -> str:
    layout_a, layout_b = _layouts(spec)
    warp = tuple(t // w for t, w in zip(c.tile, c.warps))
    lda = "M" if spec.a_trans else "K"
    ldb = "K" if spec.b_trans else "N"
    return f"""#include <cuda_runtime.h>
#include "cutlass/cutlass.h"
#include "cutlass/gemm/device/gemm.h"
#include "cutlass/epilogue/thread/linear_combination.h"

// fp32 products on CUDA cores (no TF32); D = 1·A·B + 0·C, so C is never read.
using Gemm = cutlass::gemm::device::Gemm<
    float, {layout_a}, float, {layout_b}, float, cutlass::layout::RowMajor, float,
    cutlass::arch::OpClassSimt, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<{c.tile[0]}, {c.tile[1]}, {c.tile[2]}>,
    cutlass::gemm::GemmShape<{warp[0]}, {warp[1]}, {warp[2]}>,
    cutlass::gemm::GemmShape<1, 1, 1>,
    cutlass::epilogue::thread::LinearCombination<float, 1, float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, {c.stages}>;

static Gemm::Arguments make_arguments(const void* A, const void* B, const void* C, void* D, int M, int N, int K) {{
  (void)C;
  float* d = static_cast<float*>(D);
  return Gemm::Arguments({{M, N, K}}, {{static_cast<const float*>(A), {lda}}}, {{static_cast<const float*>(B), {ldb}}},
                         {{d, N}}, {{d, N}}, {{1.0f, 0.0f}});
}}
"""


# --- the C interface every candidate exports ----------------------------------------------------
C_INTERFACE = r"""
// C interface (ctypes): prepare once (checks, workspace, parameters), run many times, release.
// Return codes: 0 ok; > 0 a cutlass::Status; < 0 minus a cudaError_t.
namespace {
struct Prepared {
  Gemm gemm;
  void* workspace = nullptr;
};
}  // namespace

extern "C" int gemmtune_cutlass_prepare(void** out, const void* A, const void* B, const void* C, void* D,
                                        int M, int N, int K) {
  Gemm::Arguments args = make_arguments(A, B, C, D, M, N, K);
  cutlass::Status status = Gemm::can_implement(args);
  if (status != cutlass::Status::kSuccess) return static_cast<int>(status);
  Prepared* prepared = new Prepared();
  size_t bytes = Gemm::get_workspace_size(args);
  if (bytes) {
    cudaError_t err = cudaMalloc(&prepared->workspace, bytes);
    if (err != cudaSuccess) { delete prepared; return -static_cast<int>(err); }
  }
  status = prepared->gemm.initialize(args, prepared->workspace);
  if (status != cutlass::Status::kSuccess) {
    cudaFree(prepared->workspace);
    delete prepared;
    return static_cast<int>(status);
  }
  *out = prepared;
  return 0;
}

extern "C" int gemmtune_cutlass_run(void* prepared, void* stream) {
  cutlass::Status status = static_cast<Prepared*>(prepared)->gemm.run(static_cast<cudaStream_t>(stream));
  if (status != cutlass::Status::kSuccess) return static_cast<int>(status);
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : -static_cast<int>(err);
}

extern "C" void gemmtune_cutlass_release(void* prepared) {
  Prepared* p = static_cast<Prepared*>(prepared);
  cudaFree(p->workspace);
  delete p;
}

extern "C" const char* gemmtune_cutlass_message(int code) {
  return code > 0 ? cutlassGetStatusString(static_cast<cutlass::Status>(code))
                  : cudaGetErrorString(static_cast<cudaError_t>(-code));
}
"""
