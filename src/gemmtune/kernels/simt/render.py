"""CUDA-core fp32 GEMM generator: SimtConfig + GemmSpec -> readable CUDA (KernelSource).

Sizes are baked in as constants: a kernel is generated for one shape, so every edge test that
can be decided now is decided now (e.g. whether a 128-bit load of a row is aligned), and the rest
are predicated loads/stores. Three templates: naive, coalesced, and tiled (shared-memory tiles
with optional register blocking, warp tiling, 128-bit accesses, double buffering and cp.async).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError
from ...kernel_source import KernelSource
from ...spec import GemmSpec
from ..config_base import ceil_div
from ..parts.epilogue import CArg, Operands, VectorArg, epilogue_call, epilogue_function
from ..parts.flags import ACQUIRE_RELEASE
from .config import C_STAGE_PAD, NAME, VERSION, SimtConfig, rejections


def entry_name(spec: GemmSpec) -> str:
    return f"{spec.slug()}_simt"


# --- pieces every template shares -------------------------------------------------------------
# C declarations of every argument a kernel (or its epilogue function) may take.
_DECL = {"A": "const float* __restrict__ A", "B": "const float* __restrict__ B",
         "C": "const float* __restrict__ C", "bias": "const float* __restrict__ bias",
         "alpha": "float alpha", "beta": "float beta", "D": "float* __restrict__ D"}


def _params(spec: GemmSpec) -> tuple[tuple[str, ...], str]:
    """Argument names in kernel order and the C parameter list."""
    names = ["A", "B", *(op.name for op in spec.epilogue.operands()), "D"]
    return tuple(names), ", ".join(_DECL[n] for n in names)


# apply_epilogue takes C's element (loaded by the caller, 128-bit where it can) and bias as stored.
EPILOGUE_OPERANDS = Operands(CArg.VALUE, VectorArg.POINTER)


def _epilogue_call(spec: GemmSpec, acc: str, row: str, col: str, c: str | None = None) -> str:
    """apply_epilogue(...) for one output; `c` is C[row, col] (default: read in place)."""
    return epilogue_call(spec.epilogue, EPILOGUE_OPERANDS, acc, row, col,
                         c if c is not None else f"C[{row} * N + {col}]")


def _epilogue_function(spec: GemmSpec) -> str:
    note = "c is C[row, col], loaded by the caller (128-bit where it can)." if spec.epilogue.reads_c else ""
    function = epilogue_function(spec.epilogue, EPILOGUE_OPERANDS, note)
    return function + "\n" if function else ""


def _accessors(spec: GemmSpec) -> str:
    a = "A[k * M + m]" if spec.a_trans else "A[m * K + k]"
    b = "B[n * K + k]" if spec.b_trans else "B[k * N + n]"
    a_store = "K×M (transposed)" if spec.a_trans else "M×K"
    b_store = "N×K (transposed)" if spec.b_trans else "K×N"
    return (
        f"// A is stored {a_store}, B is stored {b_store}, D is M×N; all row-major.\n"
        f"__device__ __forceinline__ float a_at(const float* __restrict__ A, int m, int k) {{ return {a}; }}\n"
        f"__device__ __forceinline__ float b_at(const float* __restrict__ B, int k, int n) {{ return {b}; }}\n"
    )


def _header(spec: GemmSpec, config: SimtConfig) -> str:
    return (
        f"// gemmtune {NAME} v{VERSION}: {spec.short()}\n"
        f"// config: {config.describe()}\n"
        f"constexpr int M = {spec.m}, N = {spec.n}, K = {spec.k};\n\n"
    )


def _source(spec: GemmSpec, config: SimtConfig, body: str, grid, block, dynamic_smem: int = 0) -> KernelSource:
    args, _ = _params(spec)
    code = _header(spec, config) + _accessors(spec) + "\n" + _epilogue_function(spec) + body
    return KernelSource(code=code, entry=entry_name(spec), grid=grid, block=block, args=args, spec=spec,
                        family=NAME, family_version=VERSION, config=config.to_json(), dynamic_smem=dynamic_smem)


# --- naive and coalesced: one thread per output --------------------------------------------------
def _render_simple(spec: GemmSpec, config: SimtConfig) -> KernelSource:
    _, params = _params(spec)
    if config.kind == "naive":
        why = "// naive: threadIdx.x walks rows, so a warp reads 32 different rows of A and writes D strided."
        row, col = "blockIdx.x * BM + threadIdx.x", "blockIdx.y * BN + threadIdx.y"
        grid, block = (ceil_div(spec.m, config.bm), ceil_div(spec.n, config.bn), 1), (config.bm, config.bn, 1)
    else:
        why = "// coalesced: threadIdx.x walks columns, so a warp reads B and writes D in one contiguous run."
        row, col = "blockIdx.y * BM + threadIdx.y", "blockIdx.x * BN + threadIdx.x"
        grid, block = (ceil_div(spec.n, config.bn), ceil_div(spec.m, config.bm), 1), (config.bn, config.bm, 1)
    body = f"""constexpr int BM = {config.bm}, BN = {config.bn};  // thread block = one BM×BN patch of D

{why}
extern "C" __global__ void __launch_bounds__({config.threads}) {entry_name(spec)}({params}) {{
    const int row = {row};
    const int col = {col};
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc = fmaf(a_at(A, row, k), b_at(B, k, col), acc);
    D[row * N + col] = {_epilogue_call(spec, "acc", "row", "col")};
}}
"""
    return _source(spec, config, body, grid, block)


# --- tiled: shared memory, register blocking, warp tiles, 128-bit access, pipelining -------------
@dataclass(frozen=True)
class _Operand:
    """How one input moves global -> shared. The shared tile is always k-major: Xs[k][x]."""

    name: str       # "A" or "B"
    extent: str     # "M" or "N": the non-k dimension
    tile: str       # "BM" or "BN"
    k_major: bool   # stored with k as the row index (contiguous along x): copy straight across
    vec: int        # elements per global load (4 only when rows are 16-byte aligned)
    use_async: bool  # cp.async straight into shared; transposing operands always stage in registers

    @property
    def units_per_row(self) -> str:
        return f"({self.tile} / {self.vec})" if self.k_major else f"(BK / {self.vec})"


def _operands(spec: GemmSpec, config: SimtConfig) -> tuple[_Operand, _Operand]:
    a_k_major, b_k_major = spec.a_trans, not spec.b_trans
    a_row = spec.m if a_k_major else spec.k  # length of a stored row
    b_row = spec.n if b_k_major else spec.k
    a_vec = 4 if config.vec == 4 and a_row % 4 == 0 else 1
    b_vec = 4 if config.vec == 4 and b_row % 4 == 0 else 1
    # cp.async copies bytes unchanged, so only an operand stored k-major (no transpose) can use it;
    # 4-byte transposing copies measured slower than register staging on the H200.
    return (_Operand("A", "M", "BM", a_k_major, a_vec, config.async_copy and a_k_major),
            _Operand("B", "N", "BN", b_k_major, b_vec, config.async_copy and b_k_major))


def _global_index(op: _Operand, x: str, k: str) -> str:
    ld = op.extent if op.k_major else "K"
    return f"({k}) * {ld} + ({x})" if op.k_major else f"({x}) * {ld} + ({k})"


def _unit_coords(op: _Operand) -> str:
    """Code giving (x, kq) of load unit `idx` inside the tile; consecutive threads read consecutive addresses."""
    if op.k_major:
        return (f"const int kq = idx / {op.units_per_row};\n"
                f"            const int x = (idx % {op.units_per_row}) * {op.vec};")
    return (f"const int x = idx / {op.units_per_row};\n"
            f"            const int kq = (idx % {op.units_per_row}) * {op.vec};")


def _loads_per_thread(op: _Operand) -> str:
    return f"({op.tile} * BK / ({op.vec} * THREADS))"


def _stage_type(op: _Operand) -> str:
    return "float4" if op.vec == 4 else "float"


def _emit_global_to_regs(op: _Operand) -> str:
    t, zero = _stage_type(op), ("make_float4(0.f, 0.f, 0.f, 0.f)" if op.vec == 4 else "0.0f")
    src = f"{op.name}[{_global_index(op, 'gx', 'gk')}]"
    load = f"*reinterpret_cast<const float4*>(&{src})" if op.vec == 4 else src
    return f"""    // {op.name}: global -> registers ({op.vec * 4}-byte loads), zero outside the matrix.
    auto load_{op.name.lower()} = [&](int k0, {t} (&stage)[{_loads_per_thread(op)}]) {{
        #pragma unroll
        for (int l = 0; l < {_loads_per_thread(op)}; ++l) {{
            const int idx = threadIdx.x + l * THREADS;
            {_unit_coords(op)}
            const int gx = {op.name.lower()}_origin + x, gk = k0 + kq;
            stage[l] = (gx < {op.extent} && gk < K) ? {load} : {zero};
        }}
    }};
"""


def _emit_regs_to_smem(op: _Operand) -> str:
    s = f"{op.name}s[buf]"
    if op.k_major:
        store = (f"*reinterpret_cast<float4*>(&{s}[kq][x]) = stage[l];" if op.vec == 4
                 else f"{s}[kq][x] = stage[l];")
        why = "same orientation: straight copy"
    elif op.vec == 4:
        store = (f"{s}[kq + 0][x] = stage[l].x; {s}[kq + 1][x] = stage[l].y;\n"
                 f"            {s}[kq + 2][x] = stage[l].z; {s}[kq + 3][x] = stage[l].w;")
        why = "transposed into k-major so the inner loop reads contiguous x"
    else:
        store, why = f"{s}[kq][x] = stage[l];", "transposed into k-major so the inner loop reads contiguous x"
    return f"""    // {op.name}: registers -> shared ({why}).
    auto store_{op.name.lower()} = [&](int buf, const {_stage_type(op)} (&stage)[{_loads_per_thread(op)}]) {{
        #pragma unroll
        for (int l = 0; l < {_loads_per_thread(op)}; ++l) {{
            const int idx = threadIdx.x + l * THREADS;
            {_unit_coords(op)}
            {store}
        }}
    }};
"""


def _emit_async_copy(op: _Operand) -> str:
    """cp.async global -> shared with zero fill (src-size 0) outside the matrix; no register staging."""
    copy = "cp_async16" if op.vec == 4 else "cp_async"
    return f"""    // {op.name}: global -> shared through cp.async: the copy runs while this thread computes.
    auto copy_{op.name.lower()} = [&](int k0, int buf) {{
        #pragma unroll
        for (int l = 0; l < {_loads_per_thread(op)}; ++l) {{
            const int idx = threadIdx.x + l * THREADS;
            {_unit_coords(op)}
            const int gx = {op.name.lower()}_origin + x, gk = k0 + kq;
            const bool ok = gx < {op.extent} && gk < K;
            {copy}(&{op.name}s[buf][kq][x], ok ? &{op.name}[{_global_index(op, 'gx', 'gk')}] : {op.name}, ok);
        }}
    }};
"""


CP_ASYNC_HELPERS = r"""// cp.async (sm_80+): asynchronous global->shared copies; src-size 0 writes zeros (edge tiles).
__device__ __forceinline__ void cp_async(float* smem, const float* gmem, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(dst), "l"(gmem), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async16(float* smem, const float* gmem, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N_PENDING> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N_PENDING));
}
"""


def _tile_constants(spec: GemmSpec, config: SimtConfig) -> str:
    wm, wn = (config.wm, config.wn) if config.warptiled else (config.bm, config.bn)
    wniter = config.wniter if config.warptiled else 1
    group = "32;  // a warp owns one WM×WN warp tile" if config.warptiled else \
        "THREADS;  // no warp tiling: the whole block shares one tile"
    return f"""constexpr int BM = {config.bm}, BN = {config.bn}, BK = {config.bk};  // block tile of D, k-slice depth
constexpr int TM = {config.tm}, TN = {config.tn};  // micro-tile of D each thread accumulates in registers
constexpr int WM = {wm}, WN = {wn};  // warp tile
constexpr int WMITER = {config.wmiter}, WNITER = {wniter};  // a warp sweeps its tile in WMITER×WNITER steps
constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;
constexpr int THREADS = {config.threads};
constexpr int GROUP = {group}
constexpr int TCOLS = WSUBN / TN;  // threads across one sub-tile
constexpr int PAD = {config.pad};  // floats of padding per shared row (bank conflicts)
constexpr int STAGES = {config.stages};  // shared buffers: 2 = load slice t+1 while computing slice t
constexpr int KTILES = (K + BK - 1) / BK;
static_assert(WSUBM / TM * TCOLS == GROUP, "threads of a group must cover its sub-tile exactly");
"""


def _frag_load(frag: str, smem: str, count: str, base: str, vec: bool) -> str:
    """Copy `count` contiguous shared floats to `frag + v` registers (float4 reads when vec)."""
    if vec:
        return (f"#pragma unroll\n                for (int v = 0; v < {count}; v += 4)\n"
                f"                    *reinterpret_cast<float4*>(&{frag} + v]) = "
                f"*reinterpret_cast<const float4*>(&{smem}[{base} + v]);")
    return f"#pragma unroll\n                for (int v = 0; v < {count}; ++v) {frag} + v] = {smem}[{base} + v];"


def _emit_compute(spec: GemmSpec, config: SimtConfig) -> str:
    vec = config.vec == 4
    # Full unrolling (unroll=0) spills when all of K fits in one slice: ptxas schedules the
    # straight-line body too eagerly, so that case falls back to 4. Fragments stay indexed by constants.
    factor = config.unroll or (0 if spec.k > config.bk else 4)
    kk_unroll = f"#pragma unroll {factor}" if factor else "#pragma unroll"
    a_load = _frag_load("a_frag[wi * TM", "As[buf][kk]", "TM", "a_row", vec)
    b_load = _frag_load("b_frag[wj * TN", "Bs[buf][kk]", "TN", "b_col", vec)
    return f"""    // One k-slice in shared memory -> outer products in registers.
    auto compute = [&](int buf) {{
        {kk_unroll}
        for (int kk = 0; kk < BK; ++kk) {{
            float a_frag[WMITER * TM], b_frag[WNITER * TN];  // this thread's column of A, row of B
            #pragma unroll
            for (int wi = 0; wi < WMITER; ++wi) {{
                const int a_row = warp_row * WM + wi * WSUBM + thread_row * TM;
                {a_load}
            }}
            #pragma unroll
            for (int wj = 0; wj < WNITER; ++wj) {{
                const int b_col = warp_col * WN + wj * WSUBN + thread_col * TN;
                {b_load}
            }}
            #pragma unroll
            for (int i = 0; i < WMITER * TM; ++i)
                #pragma unroll
                for (int j = 0; j < WNITER * TN; ++j) acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
        }}
    }};
"""


def _stages_c(spec: GemmSpec, config: SimtConfig) -> bool:
    return config.c_stage_bytes(spec) > 0


def _emit_store(spec: GemmSpec, config: SimtConfig) -> str:
    staged = _stages_c(spec, config)
    c_at = "Cs[(row - m_origin) * C_LD + (col - n_origin)]" if staged else "C[row * N + col]"
    load_c = (f"                const float4 c4 = *reinterpret_cast<const float4*>(&{c_at});\n"
              if spec.epilogue.reads_c else "")
    lanes = [_epilogue_call(spec, f"acc[wi * TM + i][wj * TN + j + {e}]", "row", f"col + {e}", f"c4.{x}")
             for e, x in enumerate("xyzw")]
    scalar = _epilogue_call(spec, "acc[wi * TM + i][wj * TN + j]", "row", "col", c_at if staged else None)
    wide = config.vec == 4 and config.tn % 4 == 0 and spec.n % 4 == 0
    if wide:
        inner = f"""#pragma unroll
            for (int j = 0; j < TN; j += 4) {{
                const int col = col0 + wj * WSUBN + j;
                if (row >= M || col >= N) continue;  // N % 4 == 0: a float4 is all in or all out
{load_c}                float4 out;
                out.x = {lanes[0]};
                out.y = {lanes[1]};
                out.z = {lanes[2]};
                out.w = {lanes[3]};
                *reinterpret_cast<float4*>(&D[row * N + col]) = out;
            }}"""
    else:
        inner = f"""#pragma unroll
            for (int j = 0; j < TN; ++j) {{
                const int col = col0 + wj * WSUBN + j;
                if (row < M && col < N) D[row * N + col] = {scalar};
            }}"""
    c_from = " C comes from the staged shared tile." if staged else ""
    return (f"    // Write-back: epilogue in registers, {'128-bit' if wide else 'scalar'} stores, predicated at the "
            f"edges.{c_from}\n" + _over_fragment(inner))


def _over_fragment(inner: str) -> str:
    """`inner` (the loop over one fragment row's TN columns, at `col`) inside the loops over this
    thread's fragment rows: WMITER × TM rows at `row`, WNITER column groups."""
    return f"""    const int row0 = m_origin + warp_row * WM + thread_row * TM;
    const int col0 = n_origin + warp_col * WN + thread_col * TN;
    #pragma unroll
    for (int wi = 0; wi < WMITER; ++wi)
    #pragma unroll
    for (int i = 0; i < TM; ++i) {{
        const int row = row0 + wi * WSUBM + i;
        #pragma unroll
        for (int wj = 0; wj < WNITER; ++wj) {{
            {inner}
        }}
    }}
"""


def _fill(ops: tuple[_Operand, ...], k0: str, buf: str) -> str:
    """Statements that start moving slice k0 into buffer buf (cp.async) or into registers (staged)."""
    return " ".join(f"copy_{o.name.lower()}({k0}, {buf});" if o.use_async else
                    f"load_{o.name.lower()}({k0}, {o.name.lower()}_stage);" for o in ops)


def _drain(ops: tuple[_Operand, ...], buf: str) -> str:
    """Statements that finish a fill: staged operands go registers -> shared."""
    return " ".join(f"store_{o.name.lower()}({buf}, {o.name.lower()}_stage);" for o in ops if not o.use_async)


def _emit_main_loop(config: SimtConfig, ops: tuple[_Operand, ...], stage_c: bool = False) -> str:
    groups = stage_c or any(o.use_async for o in ops)  # cp.async groups to commit and wait for
    drain_next = _drain(ops, "buf ^ 1")
    # With split-K a block walks only its share of the k-slices: k_tiles of them from k_begin.
    origin, tiles = ("k_begin + ", "k_tiles") if config.split_k > 1 else ("", "KTILES")
    if config.stages == 1:
        lines = [f"{_fill(ops, origin + 't * BK', '0')} {_drain(ops, '0')}",
                 "__syncthreads();  // the whole slice is in shared memory",
                 "compute(0);", "__syncthreads();  // everyone is done reading before it is overwritten"]
        return f"    for (int t = 0; t < {tiles}; ++t) {{\n" + "".join(f"        {x}\n" for x in lines) + "    }\n"
    prologue = [f"{_fill(ops, origin + '0', '0')}" + (" cp_async_commit();" if groups else ""),
                _drain(ops, "0"), "cp_async_wait<0>();" if groups else "", "__syncthreads();"]
    # With stage_c, C's copy is its own group, committed after slice t+1's at t == C_ISSUE: waiting
    # for all but the newest group then completes the slice and leaves C in flight one more slice.
    wait = ("if (t == C_ISSUE && more) cp_async_wait<1>(); else cp_async_wait<0>();  "
            "// slice t+1 has landed (C may still be in flight)") if stage_c else \
        "cp_async_wait<0>();  // slice t+1 has landed in shared memory"
    body = ["const int buf = t & 1;", f"const bool more = t + 1 < {tiles};",
            f"if (more) {{ {_fill(ops, origin + '(t + 1) * BK', 'buf ^ 1')} }}",
            "cp_async_commit();" if groups else "",
            "if (t == C_ISSUE) { copy_c(); cp_async_commit(); }  // C overlaps the last two slices" if stage_c else "",
            "compute(buf);  // overlaps the moves of slice t+1",
            f"if (more) {{ {drain_next} }}" if drain_next else "",
            wait if groups else "",
            "__syncthreads();  // one barrier: the other buffer was last read before the previous one"]
    return ("    // Pipeline: slice t+1 moves (cp.async or through registers) while slice t is multiplied.\n"
            + "".join(f"    {x}\n" for x in prologue if x)
            + f"    for (int t = 0; t < {tiles}; ++t) {{\n" + "".join(f"        {x}\n" for x in body if x) + "    }\n")


def _emit_copy_c(spec: GemmSpec) -> str:
    """cp.async of the block's BM×BN tile of C into Cs (row stride C_LD), zero outside the matrix."""
    wide = spec.n % 4 == 0  # then a 16-byte unit of a row is all inside or all outside
    unit, copy = (4, "cp_async16") if wide else (1, "cp_async")
    return f"""    // C: the epilogue's BM×BN tile, global -> shared by cp.async while the last two k-slices are
    // multiplied, so the write-back reads C from shared memory instead of stalling on DRAM.
    auto copy_c = [&]() {{
        for (int idx = threadIdx.x; idx < BM * (BN / {unit}); idx += THREADS) {{
            const int r = idx / (BN / {unit}), c = (idx % (BN / {unit})) * {unit};
            const int gr = m_origin + r, gc = n_origin + c;
            const bool ok = gr < M && gc < N;
            {copy}(&Cs[r * C_LD + c], ok ? &C[gr * N + gc] : C, ok);
        }}
    }};
"""


def _emit_prefetch_c(spec: GemmSpec, config: SimtConfig) -> str:
    if not (config.prefetch_c and spec.epilogue.reads_c):
        return ""
    return """    // The epilogue reads C: start pulling this block's C tile into L2 now (128-byte lines), so
    // the write-back finds it there instead of stalling on DRAM after the last k-slice.
    constexpr int C_LINES_PER_ROW = (BN + 31) / 32;
    for (int l = threadIdx.x; l < BM * C_LINES_PER_ROW; l += THREADS) {
        const int r = m_origin + l / C_LINES_PER_ROW, c = n_origin + (l % C_LINES_PER_ROW) * 32;
        if (r < M && c < N) asm volatile("prefetch.global.L2 [%0];" :: "l"(C + (size_t)r * N + c));
    }
"""


_C_TILE_DECL = f"""    // The staged C tile lives in dynamic shared memory: BM×(BN+4) floats can exceed the 48 KiB static limit.
    extern __shared__ __align__(16) float Cs[];  // Cs[r * C_LD + c] = C[m_origin + r, n_origin + c]
    constexpr int C_LD = BN + {C_STAGE_PAD}, C_ISSUE = KTILES >= 2 ? KTILES - 2 : 0;  // C's copy starts at slice C_ISSUE
"""


SPLIT_TURN_HELPERS = ACQUIRE_RELEASE + r"""// Split-K turns: the blocks of one output tile add into D one after another, in order of
// blockIdx.z. split_turn[tile] holds whose turn it is; module memory starts at zero and the last
// split sets it back to zero, so the kernel needs no workspace and no memset between launches.
__device__ unsigned int split_turn[TILES_N * TILES_M];
__device__ __forceinline__ void wait_turn(const unsigned int* turn, unsigned int mine) {
    // acquire: the previous split's partial sums in D are visible once its turn ends
    if (threadIdx.x == 0) spin_until_equal(turn, mine);
    __syncthreads();
}
__device__ __forceinline__ void pass_turn(unsigned int* turn, unsigned int next) {
    __threadfence();  // every thread's stores to D reach L2 before the turn moves on
    __syncthreads();
    if (threadIdx.x == 0) store_release(turn, next);
}
"""


def _split_constants(spec: GemmSpec, config: SimtConfig) -> str:
    if config.split_k == 1:
        return ""
    return (f"constexpr int SPLITS = {config.split_k};  // blocks along K per output tile (grid z)\n"
            f"constexpr int TILES_M = {ceil_div(spec.m, config.bm)}, TILES_N = {ceil_div(spec.n, config.bn)};\n"
            + (_workspace_declarations(config) if config.split_reduce == "workspace" else SPLIT_TURN_HELPERS))


def _part(config: SimtConfig) -> int:
    """Accumulators per workspace access: a float4 where the thread's count allows, else one float."""
    return 4 if config.accumulators % 4 == 0 else 1


def _workspace_declarations(config: SimtConfig) -> str:
    part = _part(config)
    kind = "float4" if part == 4 else "float"
    return f"""constexpr int ACC_COLS = WNITER * TN, ACC = WMITER * TM * ACC_COLS;  // accumulators per thread
constexpr int PARTS = ACC / {part};  // {kind}s of them a thread stores and loads
// Split-K workspace: every split's partial tile, thread-major (partials[tile][split][part][thread]) so
// each store and load is coalesced; split_arrivals[tile] counts the splits that have stored. Module
// memory starts at zero and the last split sets its count back to zero: no memset between launches.
__device__ {kind} split_partials[TILES_M * TILES_N * SPLITS * PARTS * THREADS];
__device__ unsigned int split_arrivals[TILES_M * TILES_N];
"""


def _acc_at(a: str) -> str:
    """Accumulator number `a` (row-major over the thread's WMITER·TM × WNITER·TN fragment)."""
    return f"acc[({a}) / ACC_COLS][({a}) % ACC_COLS]"


def _emit_workspace_reduce(config: SimtConfig) -> str:
    """Store this split's partials and count in; the last split to arrive sums every split's partials
    (its own too, from L2) in split order into acc: the same sum whichever split is last."""
    if _part(config) == 4:
        elems = [_acc_at(f"4 * q + {e}") for e in range(4)]
        own = f"make_float4({', '.join(elems)})"
        add = " ".join(f"{e} += p.{x};" for e, x in zip(elems, "xyzw"))
        kind = "float4"
    else:
        own, add, kind = _acc_at("q"), f"{_acc_at('q')} += p;", "float"
    # Splits whose loads are in flight together: about 64 registers of them, at least one split.
    unroll = max(1, min(config.split_k, 64 // config.accumulators))
    return f"""    // Split-K through the workspace: store this split's partial sums and count in. The last split to
    // arrive adds all SPLITS partials in split order and writes D below like the unsplit kernel.
    {{
        const int tile = blockIdx.y * TILES_N + blockIdx.x;
        {kind}* const parts = split_partials + (size_t)tile * SPLITS * PARTS * THREADS + threadIdx.x;
        #pragma unroll
        for (int q = 0; q < PARTS; ++q) __stcg(&parts[(blockIdx.z * PARTS + q) * THREADS], {own});
        __threadfence();  // this thread's partials reach L2 before the block counts itself in
        __syncthreads();
        // Thread 0 counts the block in; the barrier tells every thread whether it was the last.
        const bool last_split = __syncthreads_or(threadIdx.x == 0 && atomicAdd(&split_arrivals[tile], 1u) == SPLITS - 1);
        if (!last_split) return;
        __threadfence();  // every split has counted in: its partials are in L2 (read past L1 by __ldcg)
        #pragma unroll
        for (int q = 0; q < ACC; ++q) {_acc_at("q")} = 0.0f;
        #pragma unroll {unroll}
        for (int z = 0; z < SPLITS; ++z)  // split order, whichever split is last: deterministic
            #pragma unroll
            for (int q = 0; q < PARTS; ++q) {{
                const {kind} p = __ldcg(&parts[(z * PARTS + q) * THREADS]);
                {add}
            }}
        if (threadIdx.x == 0) split_arrivals[tile] = 0;  // all SPLITS arrived: ready for the next launch
    }}
"""


SPLIT_RANGE = """    // This block's share of the k-slices: an even split (shares differ by at most one slice).
    const int k_first = blockIdx.z * KTILES / SPLITS, k_tiles = (blockIdx.z + 1) * KTILES / SPLITS - k_first;
    const int k_begin = k_first * BK;
"""


def _emit_split_store(spec: GemmSpec, config: SimtConfig) -> str:
    """Serial split-K write-back: add the earlier splits' sum from D (L2, not L1: other SMs wrote it),
    store the new sum; the last split applies the epilogue. Same order every run: deterministic."""
    final = _epilogue_call(spec, "v", "row", "col")
    return """    // Split-K write-back: wait for this tile's turn, add to the partial sum the earlier splits left
    // in D, and store; the last split applies the epilogue and hands the turn back to split 0.
    const int tile = blockIdx.y * TILES_N + blockIdx.x;
    const bool first = blockIdx.z == 0, last = blockIdx.z == SPLITS - 1;
    if (!first) wait_turn(&split_turn[tile], blockIdx.z);
""" + _over_fragment(f"""#pragma unroll
            for (int j = 0; j < TN; ++j) {{
                const int col = col0 + wj * WSUBN + j;
                if (row >= M || col >= N) continue;
                const float v = acc[wi * TM + i][wj * TN + j] + (first ? 0.0f : __ldcg(&D[row * N + col]));
                if (last) D[row * N + col] = {final};
                else __stcg(&D[row * N + col], v);
            }}""") + """    pass_turn(&split_turn[tile], last ? 0u : blockIdx.z + 1);
"""


def _emit_write_back(spec: GemmSpec, config: SimtConfig) -> str:
    if config.split_k == 1:
        return _emit_store(spec, config)
    if config.split_reduce == "workspace":
        return _emit_workspace_reduce(config) + _emit_store(spec, config)
    return _emit_split_store(spec, config)


def _render_tiled(spec: GemmSpec, config: SimtConfig) -> KernelSource:
    _, params = _params(spec)
    a, b = _operands(spec, config)
    stage_c = _stages_c(spec, config)
    movers = "".join(_emit_async_copy(o) if o.use_async else _emit_global_to_regs(o) + _emit_regs_to_smem(o)
                     for o in (a, b)) + (_emit_copy_c(spec) if stage_c else "")
    staging = "".join(f"    {_stage_type(o)} {o.name.lower()}_stage[{_loads_per_thread(o)}];\n"
                      for o in (a, b) if not o.use_async)
    split = config.split_k > 1
    body = (_tile_constants(spec, config) + _split_constants(spec, config) + "\n" + (CP_ASYNC_HELPERS if a.use_async or b.use_async or stage_c else "") + f"""
// (THREADS, 1): at least one block per SM, so ptxas may use up to 255 registers instead of
// trimming to a guessed occupancy target and spilling (seen on sm_80 at odd shapes).
extern "C" __global__ void __launch_bounds__(THREADS, 1) {entry_name(spec)}({params}) {{
    // Shared tiles are k-major (Xs[k][x]) so a thread's TM rows / TN columns are contiguous.
    __shared__ __align__(16) float As[STAGES][BK][BM + PAD];
    __shared__ __align__(16) float Bs[STAGES][BK][BN + PAD];
{_C_TILE_DECL if stage_c else ""}    const int m_origin = blockIdx.y * BM, n_origin = blockIdx.x * BN;  // this block's corner of D
    const int a_origin = m_origin, b_origin = n_origin;
    const int group = threadIdx.x / GROUP, lane = threadIdx.x % GROUP;
    const int warp_row = group / (BN / WN), warp_col = group % (BN / WN);
    const int thread_row = lane / TCOLS, thread_col = lane % TCOLS;
    float acc[WMITER * TM][WNITER * TN] = {{}};
{SPLIT_RANGE if split else ""}{_emit_prefetch_c(spec, config)}
{movers}{staging}{_emit_compute(spec, config)}
{_emit_main_loop(config, (a, b), stage_c)}
{_emit_write_back(spec, config)}}}
""")
    grid = (ceil_div(spec.n, config.bn), ceil_div(spec.m, config.bm), config.split_k)
    return _source(spec, config, body, grid, (config.threads, 1, 1), config.c_stage_bytes(spec))


def render(spec: GemmSpec, config: SimtConfig, arch: str = "sm_90") -> KernelSource:
    """Generate the kernel for `spec` with `config`; ConfigError lists every broken constraint."""
    broken = rejections(config, spec, arch)
    if broken:
        raise ConfigError(f"config rejected for {spec.short()}: " + "; ".join(broken.values()))
    if config.kind in ("naive", "coalesced"):
        return _render_simple(spec, config)
    return _render_tiled(spec, config)
