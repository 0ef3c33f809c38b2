"""The gemv tensor-core path without a GPU: its constraints, the k permutation of the generated code
(emulated in numpy), NVRTC for sm_80 and sm_90 across M, N, K, dtypes and epilogues with the SASS it
gives (HMMA, no local memory, the loads of a step in flight together), the search space's footprints
and the chooser's pick."""
from __future__ import annotations

import re

import numpy as np
import pytest
from sass_dump import sass as dump_sass

from gemmtune.chooser import choose
from gemmtune.chooser.candidates import candidates
from gemmtune.compiler import compile_kernel
from gemmtune.errors import ConfigError
from gemmtune.kernels import get_family
from gemmtune.kernels.gemv.config import GemvConfig, tensor_core_rejection
from gemmtune.spec import GemmSpec
from gemmtune.tune.space import candidate_set, first_failing, space_for, verdict

FAMILY = get_family("gemv")
TC = GemvConfig(threads=256, warps_per_output=8, unroll=4, tensor_cores=True, mma_tiles=2)
DECODE = GemmSpec(16, 4096, 4096, "nt", "bf16")


def _reasons(config, spec, arch="sm_90") -> str:
    return "; ".join(FAMILY.rejections(config, spec, arch).values())


# --- constraints -----------------------------------------------------------------------------------
def test_valid_for_a_few_rows_of_16_bit_or_tf32_a_in_layout_nt_on_sm_80_and_newer():
    for m in (2, 7, 8, 16, 17, 33, 64):  # past 16: blocks of 16 rows
        for dtype in ("bf16", "fp16", "tf32"):
            for arch in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100"):
                assert FAMILY.rejections(TC, GemmSpec(m, 1000, 1000, "nt", dtype), arch) == {}, (m, dtype, arch)


@pytest.mark.parametrize("spec, arch, reason", [
    (GemmSpec(16, 4096, 4096, "nn", "bf16"), "sm_90", "layout nt"),
    (GemmSpec(16, 4096, 4096, "tt", "bf16"), "sm_90", "layout nt"),
    (GemmSpec(16, 4096, 4096, "nt", "fp32"), "sm_90", "bf16 or fp16 or tf32, not fp32"),
    (GemmSpec(16, 4096, 1002, "nt", "tf32"), "sm_90", "K = 1002 is not a multiple of 4"),
    (GemmSpec(1, 4096, 4096, "nt", "bf16"), "sm_90", "2-64 rows of A in layout nt"),
    (GemmSpec(4096, 1, 4096, "nt", "bf16"), "sm_90", "2-64 rows of A"),  # N = 1: A is streamed, one vector
    (GemmSpec(16, 4096, 4096, "nt", "fp16"), "sm_75", "sm_80+"),
    (GemmSpec(16, 4096, 1004, "nt", "bf16"), "sm_90", "K = 1004 is not a multiple of 8"),
    (GemmSpec(7, 100, 13, "nt", "fp16"), "sm_80", "K = 13 is not a multiple of 8"),
], ids=lambda v: v.short() if isinstance(v, GemmSpec) else str(v))
def test_rejected_with_a_reason(spec, arch, reason):
    assert reason in _reasons(TC, spec, arch)
    assert reason in tensor_core_rejection(spec, arch)
    assert FAMILY.rejections(TC.with_(tensor_cores=False, mma_tiles=1), spec, arch).get("tensor_cores") is None
    with pytest.raises(ConfigError, match="tensor_cores"):
        FAMILY.render(spec, TC, arch)


def test_option_values_are_checked():
    assert "tensor_cores option" in _reasons(GemvConfig(mma_tiles=2), DECODE)
    assert "mma_tiles=3" in _reasons(TC.with_(mma_tiles=3), DECODE)
    assert "leave it 1" in _reasons(TC.with_(outputs_per_warp=2), DECODE)
    assert "loads of B in flight" in _reasons(TC.with_(mma_tiles=4, unroll=8), DECODE)
    assert "registers" in _reasons(GemvConfig(threads=512, warps_per_output=8, unroll=4, tensor_cores=True,
                                              mma_tiles=4), DECODE)


def test_json_of_configs_from_before_is_unchanged():
    assert GemvConfig().to_json() == {"threads": 256, "warps_per_output": 1, "threads_x": 8,
                                      "outputs_per_warp": 1, "unroll": 4}
    assert GemvConfig.from_json(TC.to_json()) == TC
    assert TC.to_json()["tensor_cores"] is True and "tensor cores" in TC.describe()


def test_space_footprints_agree_with_direct_evaluation():
    """Every gemv config of the grid, judged through the broadcast tables and directly."""
    space = space_for("gemv")
    assert {p.name: p.domain for p in space.params}["tensor_cores"] == (False, True)
    for spec, arch in ((DECODE, "sm_90"), (GemmSpec(7, 1000, 1000, "nt", "fp16"), "sm_80"),
                       (GemmSpec(16, 4096, 4096, "nn", "bf16"), "sm_90")):
        valid = candidate_set(space, spec, arch)
        for code in range(0, space.size, 7):
            config = space.config_at(np.unravel_index(code, space.shape))
            direct = verdict(space, config, spec, arch)
            assert first_failing(space, config, spec, arch) == direct, (config, spec.short())
            assert (valid.position_of(config) is not None) == (direct is None)
        assert any(c.tensor_cores for c in valid.configs(range(len(valid)))) == (spec.layout == "nt")


# --- the k permutation, emulated -------------------------------------------------------------------
def _fragment_words(code: str) -> dict[str, list[str]]:
    """The generated multiply's register lists: {'a_first': ['a[0].x', 'upper.x', ...], ...}."""
    found = {}
    for name in ("a_first", "a_second", "b_first", "b_second"):
        match = re.search(rf"{name}\[\d\] = \{{([^}}]*)\}}", code)
        assert match, name
        found[name] = [w.strip() for w in match.group(1).split(",")]
    return found


def _word(stored: np.ndarray, row: int, t: int, name: str, values: int) -> np.ndarray:
    """The `values` values (first first) in 32-bit word .x/.y/.z/.w of lane t's 16-byte load of `row`
    (2 of a 16-bit type, 1 of tf32; the load holds 4 words)."""
    w = "xyzw".index(name)
    return stored[row, 4 * values * t + values * w: 4 * values * t + values * w + values]


@pytest.mark.parametrize("dtype, m", [("bf16", 2), ("bf16", 8), ("bf16", 16), ("tf32", 5), ("tf32", 16)])
def test_the_generated_fragments_multiply_the_right_k(dtype, m):
    """Lay each lane's registers, as the generated code fills them from its 16-byte loads, into the
    mma's A (16 x mma k, row) and B (mma k x 8, col) by the PTX fragment layout (m16n8k16: two values
    per register; tf32's m16n8k8: one), run the chunk's two mma in numpy, and compare with the plain
    product over the chunk's stored k (32 of a 16-bit type, 16 of tf32)."""
    code = FAMILY.render(GemmSpec(m, 64, 64, "nt", dtype), TC, "sm_90").code
    words = _fragment_words(code)
    v = 1 if dtype == "tf32" else 2  # values per 32-bit register
    half = 4 * v  # the mma's k = 8v; registers 2 and 3 (A), 1 (B) hold its upper half
    assert f"PIECE = {4 * v}" in code
    rng = np.random.default_rng(m)
    a = np.zeros((16, 16 * v))
    a[:m] = rng.standard_normal((m, 16 * v))  # the vectors; rows past M are the zero padding
    w = rng.standard_normal((8, 16 * v))  # 8 outputs' rows of W, the chunk's stored k
    d = np.zeros((16, 8))
    for s in ("first", "second"):
        mma_a, mma_b = np.zeros((16, 2 * half)), np.zeros((2 * half, 8))
        for lane in range(32):
            g, t = lane // 4, lane % 4
            regs = [_word(a, g + 8 * ("upper" in x), t, x[-1], v) for x in words[f"a_{s}"]]
            # A registers: (row g, k vt..), (row g+8, k vt..), (row g, k vt+half..), (row g+8, k vt+half..)
            for r, (row, k) in enumerate(((g, v * t), (g + 8, v * t), (g, v * t + half), (g + 8, v * t + half))):
                mma_a[row, k:k + v] = regs[r]
            assert all(x.startswith("w[j].") for x in words[f"b_{s}"])
            low, high = (_word(w, g, t, x[-1], v) for x in words[f"b_{s}"])
            mma_b[v * t:v * t + v, g], mma_b[v * t + half:v * t + half + v, g] = low, high  # B: (k vt.., col g), (k vt+half.., col g)
        d += mma_a @ mma_b
    np.testing.assert_allclose(d, a @ w.T, rtol=1e-12, atol=1e-12)


# --- NVRTC and SASS ----------------------------------------------------------------------------------
EPILOGUES = ("none", "bias_col+relu", "add", "alpha+beta+bias_row+gelu")


def _compiled(spec: GemmSpec, config, arch: str):
    compiled = compile_kernel(FAMILY.render(spec, config, arch), arch)
    assert compiled.resources.spills == 0 and compiled.resources.stack_bytes == 0, (
        spec.short(), config.describe(), arch, compiled.resources.summary())
    return compiled


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32"])
def test_chooser_picks_compile_without_spills(arch, dtype, untuned_tensor_cores):
    """M in {2, 7, 8, 16}, N in {8, 127, 1000, 4096}, K in {64, 4096}, epilogues in turn: the config
    the chooser gives (the tensor-core path for each of them) compiles without spills or stack."""
    index = 0
    for m in (2, 7, 8, 16):
        for n in (8, 127, 1000, 4096):
            for k in (64, 4096):
                spec = GemmSpec(m, n, k, "nt", dtype, EPILOGUES[index % len(EPILOGUES)])
                index += 1
                config = choose(spec, arch, family="gemv").config  # (4-16 rows on sm_90: swap-AB wgmma untuned)
                assert config.tensor_cores, spec.short()
                _compiled(spec, config, arch)


def test_every_epilogue_and_fp32_output_compile():
    for epilogue in EPILOGUES + ("bias_row+gelu+add",):
        for spec in (GemmSpec(16, 1000, 4096, "nt", "bf16", epilogue), GemmSpec(7, 127, 64, "nt", "fp16", epilogue),
                     GemmSpec(8, 4096, 1000, "nt", "bf16", epilogue, "fp32")):
            _compiled(spec, TC, "sm_80")


def _block_shapes() -> list[GemvConfig]:
    """Tensor-core block shapes: warps per group × 8-output tiles × unroll, with 16-64 outputs per
    block (under 16, A's L2 traffic outgrows W's at M = 16; over 64, N = 4096 leaves SMs idle)."""
    found = [GemvConfig(threads=t, warps_per_output=w, unroll=u, tensor_cores=True, mma_tiles=tiles)
             for t in (128, 256, 512) for w in (1, 2, 4, 8) for tiles in (1, 2, 4) for u in (2, 4, 8) if w * 32 <= t]
    return [c for c in found if c.outputs_per_block() in (16, 32, 64)]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_tensor_core_block_shape_compiles_without_spills(arch, untuned_tensor_cores):
    from gemmtune.chooser.candidates import UNTUNED_TENSOR_CORE_CONFIG

    family = get_family("gemv")
    for spec in (GemmSpec(16, 4096, 4096, "nt", "bf16", "bias_col+relu"), GemmSpec(8, 14336, 4096, "nt", "fp16")):
        shapes = [c for c in _block_shapes() if not family.rejections(c, spec, arch)]
        assert len(shapes) > 20 and UNTUNED_TENSOR_CORE_CONFIG in shapes
        assert candidates("gemv", spec, arch, 132) == [UNTUNED_TENSOR_CORE_CONFIG]
        for config in shapes:
            _compiled(spec, config, arch)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype, hmma", [("bf16", "HMMA.16816.F32.BF16"), ("fp16", "HMMA.16816.F32 "),
                                         ("tf32", "HMMA.1688.F32.TF32")])
def test_sass_holds_hmma_and_no_local_memory(tmp_path, arch, dtype, hmma):
    for m in (2, 16):
        sass = dump_sass(tmp_path, _compiled(GemmSpec(m, 4096, 4096, "nt", dtype, "bias_col+relu"), TC, arch).cubin)
        assert hmma in sass
        assert "LDG.E.NA.128" in sass  # W streamed with ld.global.nc.L1::no_allocate, 16 bytes
        assert "LDL" not in sass and "STL" not in sass


def test_sass_keeps_a_step_of_loads_in_flight(tmp_path):
    """In the main loop, every 16-byte load of W of one step comes before the step's first HMMA
    (sm_90): without __launch_bounds__(THREADS, 1) ptxas put about 3 between the mma."""
    sass = dump_sass(tmp_path, _compiled(DECODE, TC, "sm_90").cubin)
    ops = "".join("W" if "LDG.E.NA.128" in line else "H" if "HMMA" in line else "B" if "BRA" in line else ""
                  for line in sass.splitlines())
    loop = ops[ops.index("W"):]
    assert loop.index("H") >= TC.unroll * TC.mma_tiles, ops


# --- the chooser -------------------------------------------------------------------------------------
@pytest.fixture
def untuned_tensor_cores(monkeypatch):
    """The chooser with the tensor-core path on for untuned shapes (pinned on, whatever the default)."""
    import importlib

    candidates_module = importlib.import_module("gemmtune.chooser.candidates")  # the package re-exports a function of that name

    monkeypatch.setattr(candidates_module, "GEMV_TENSOR_CORES_UNTUNED", True)


def test_the_chooser_follows_the_untuned_switch():
    from gemmtune.chooser.candidates import GEMV_TENSOR_CORES_UNTUNED

    assert choose(DECODE, "sm_90", family="gemv").config.tensor_cores == GEMV_TENSOR_CORES_UNTUNED


def test_chooser_takes_tensor_cores_for_small_batch_decode(untuned_tensor_cores):
    for spec in (DECODE, GemmSpec(16, 14336, 4096, "nt", "bf16"), GemmSpec(8, 4096, 4096, "nt", "fp16"),
                 GemmSpec(2, 4096, 14336, "nt", "bf16")):
        for arch in ("sm_80", "sm_90"):
            pick = choose(spec, arch, family="gemv" if arch == "sm_90" else None)  # (sm_90: swap-AB untuned from 4 rows)
            assert pick.family == "gemv" and pick.config.tensor_cores, (spec.short(), arch)
            assert 16 <= pick.config.outputs_per_block() <= 64


@pytest.mark.parametrize("spec, arch", [
    (GemmSpec(8, 4096, 4096, "nn", "bf16"), "sm_90"), (GemmSpec(16, 4096, 4096, "nt", "fp32"), "sm_90"),
    (GemmSpec(16, 4096, 4096, "tt", "bf16"), "sm_90"), (GemmSpec(1, 4096, 4096, "nt", "bf16"), "sm_90"),
    (GemmSpec(16, 4096, 4096, "nt", "fp16"), "sm_75"), (GemmSpec(16, 4096, 1004, "nt", "bf16"), "sm_90"),
], ids=lambda v: v.short() if isinstance(v, GemmSpec) else v)
def test_chooser_keeps_the_cuda_core_kernels_elsewhere(spec, arch, untuned_tensor_cores):
    pick = choose(spec, arch)
    assert pick.family == "gemv" and not pick.config.tensor_cores
    assert not any(c.tensor_cores for c in candidates("gemv", spec, arch, 132))


# --- layout nn: the columns kernel on tensor cores ----------------------------------------------------
NN = GemvConfig(threads=256, warps_per_output=8, unroll=4, tensor_cores=True, mma_tiles=4)


@pytest.mark.parametrize("spec, reason", [
    (GemmSpec(16, 4096, 4096, "nn", "bf16"), "fp32 or tf32, not bf16"),
    (GemmSpec(16, 4096, 4096, "nn", "fp32", math="simt"), "math simt"),
    (GemmSpec(16, 4096, 4098, "nn", "fp32"), "K = 4098 is not a multiple of 4"),
    (GemmSpec(16, 4098, 4096, "nn", "tf32"), "N = 4098 is not a multiple of it"),
    (GemmSpec(1, 4096, 4096, "nn", "fp32"), "2-16 rows of A"),
    (GemmSpec(16, 4096, 4096, "tn", "fp32"), "layout nt (bf16, fp16, tf32) or nn (fp32, tf32)"),
], ids=lambda v: v.short() if isinstance(v, GemmSpec) else str(v))
def test_columns_path_rejected_with_a_reason(spec, reason):
    assert reason in _reasons(NN, spec)


def test_columns_path_valid_for_fp32_and_tf32_in_layout_nn():
    for m in (2, 7, 8, 16):
        for dtype in ("fp32", "tf32"):
            assert FAMILY.rejections(NN, GemmSpec(m, 1000, 1000, "nn", dtype), "sm_90") == {}, (m, dtype)
    assert FAMILY.rejections(NN.with_(mma_tiles=1), GemmSpec(16, 127, 1000, "nn", "fp32"), "sm_80") == {}
    # math 3xtf32 runs only on the tensor-core path
    split = GemmSpec(16, 4096, 4096, "nn", "fp32", math="3xtf32")
    assert FAMILY.rejections(NN, split, "sm_90") == {}
    assert "tensor-core path" in _reasons(GemvConfig(threads=512, threads_x=8, unroll=1), split)
    assert "tensor-core path" in FAMILY.supports(GemmSpec(1, 4096, 4096, "nn", "fp32", math="3xtf32"), "sm_90")


@pytest.mark.parametrize("dtype", ["fp32", "tf32"])
def test_columns_path_compiles_without_local_memory(dtype, tmp_path):
    """NVRTC for sm_80 and sm_90: HMMA (three per product in fp32), the split's exact path only in fp32,
    no local memory, most of a step's W loads in flight before the first mma."""
    for arch in ("sm_80", "sm_90"):
        for spec, config in ((GemmSpec(16, 4096, 4096, "nn", dtype, "bias_col+relu"), NN),
                             (GemmSpec(5, 1000, 1004, "nn", dtype, "add"), NN.with_(mma_tiles=2, unroll=2)),
                             (GemmSpec(16, 127, 1000, "nn", dtype), NN.with_(mma_tiles=1, warps_per_output=2))):
            kern = compile_kernel(FAMILY.render(spec, config, arch), arch)
            assert kern.resources.spill_store_bytes == 0 and kern.resources.stack_bytes == 0, (spec.short(), kern.resources)
            text = dump_sass(tmp_path, kern.cubin)
            assert "LDL" not in text and "STL" not in text
            mma = len(re.findall(r"HMMA\.1688\.F32\.TF32", text))
            per_step = config.unroll * config.mma_tiles * 2 * (3 if dtype == "fp32" else 1)
            assert mma == 2 * per_step, (spec.short(), mma, per_step)  # the whole-span loop and the tail span
            assert ("VOTE.ANY" in text) == (dtype == "fp32")
            first_mma = text.index("HMMA")
            loads = [m.start() for m in re.finditer(r"LDG\.E\.NA", text)]
            # (ptxas for sm_80 moves two of the sixteen past the first mma in tf32)
            assert len([p for p in loads if p < first_mma]) >= 3 * config.unroll, spec.short()


def test_chooser_gives_tf32_nn_from_8_rows_the_columns_tensor_cores():
    # (on sm_90 the TMA-fed columns kernel comes first: test_gemv_ring.py; sm_80 has no TMA)
    for m, expected in ((16, True), (8, True), (4, False), (2, False)):
        assert choose(GemmSpec(m, 4096, 4096, "nn", "tf32"), "sm_80").config.tensor_cores is expected, m
        assert not choose(GemmSpec(m, 4096, 4096, "nn", "fp32"), "sm_80").config.tensor_cores, m
        assert choose(GemmSpec(m, 4096, 4096, "nn", "tf32"), "sm_90").config.ring_stages, m
    assert not choose(GemmSpec(16, 4098, 4096, "nn", "tf32"), "sm_80").config.tensor_cores  # N % 4
