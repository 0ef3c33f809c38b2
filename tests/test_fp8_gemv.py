"""The fp8 decode GEMV (issue 70; kernels/gemv/fp8_rows.py). Without a GPU: its spec and constraints, the integer
fp8 -> f16 conversion over every code, the k permutation emulated in numpy, NVRTC compiles for sm_89/sm_90/sm_100
across M, N, K and conversions with the SASS they give (HMMA, no local memory, a step's loads before its mma),
scaled_mm's shapes on meta tensors. On a GPU (sm_89+): every shape class against the float64 reference of the
fp8 values (D poisoned with NaN), scaled_mm routed here against torch._scaled_mm, CUDA-graph replay, and
compute-sanitizer over odd shapes."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gemmtune.errors import ConfigError, SpecError
from gemmtune.fp8 import FORMATS
from gemmtune.kernels.gemv import fp8_rows
from gemmtune.kernels.gemv.fp8_config import Fp8GemvConfig, Fp8GemvSpec, default_config, rejections

SRC = Path(__file__).resolve().parents[1] / "src"


# --- no GPU: the spec and the config --------------------------------------------------------------------
def test_the_spec_takes_decode_shapes_with_16_byte_rows():
    spec = Fp8GemvSpec(5, 136, 528, "e5m2", "rowwise", "fp16", bias=True)
    assert (spec.vector_blocks, spec.weight_bytes) == (1, 136 * 528)
    assert Fp8GemvSpec(9, 7, 16).vector_blocks == 2
    assert spec.slug() == "gemv_e5m2_rowwise_fp16_5x136x528_bias"
    for bad, match in (((17, 64, 64), "at most 16"), ((4, 64, 40), "multiple of 16"), ((0, 64, 64), ">= 1")):
        with pytest.raises(SpecError, match=match):
            Fp8GemvSpec(*bad)
    with pytest.raises(SpecError, match="scaling 'block'"):
        Fp8GemvSpec(4, 64, 64, scaling="block")
    with pytest.raises(SpecError, match="fmt"):
        Fp8GemvSpec(4, 64, 64, fmt="bf16")


def test_default_config_fills_the_sms_and_fits_short_k():
    assert default_config(Fp8GemvSpec(1, 14336, 4096)).warps_per_output == 8  # 896 tiles: 8 warps each fill 132 SMs
    assert default_config(Fp8GemvSpec(1, 1024, 4096)).warps_per_output == 16  # 64 tiles: as many warps as K has spans
    assert default_config(Fp8GemvSpec(1, 1024, 16384)).warps_per_output == 32
    assert default_config(Fp8GemvSpec(4, 4096, 528)).warps_per_output == 2  # 3 spans of 256 k
    assert default_config(Fp8GemvSpec(4, 4096, 16)).warps_per_output == 1
    e5m2 = default_config(Fp8GemvSpec(4, 4096, 4096, "e5m2"))
    assert (e5m2.w_convert, e5m2.a_convert) == ("alu", "alu")  # a byte permute: the code is an f16's top byte


def test_rejections_name_their_reason():
    spec = Fp8GemvSpec(16, 4096, 4096)
    assert rejections(Fp8GemvConfig(), spec, "sm_90") == {}
    assert "sm_89+" in rejections(Fp8GemvConfig(), spec, "sm_80")["arch"]
    assert "partial sums" in rejections(Fp8GemvConfig(warps_per_output=32, tiles=4), spec, "sm_90")["partial_sums"]
    assert "registers a thread" in rejections(Fp8GemvConfig(tiles=4, unroll=8), spec, "sm_90")["registers"]
    assert "cvt, alu" in rejections(Fp8GemvConfig(w_convert="lut"), spec, "sm_90")["w_convert"]
    with pytest.raises(ConfigError, match="sm_89"):
        fp8_rows.render(spec, Fp8GemvConfig(), "sm_80")


# --- no GPU: the arithmetic the CUDA spells out ------------------------------------------------------------
def _f16_pair(spread: np.ndarray) -> np.ndarray:
    """(low, high) f16 values of 32-bit words."""
    return np.stack([(spread & 0xFFFF).astype(np.uint16), (spread >> 16).astype(np.uint16)], -1).view(np.float16)


def _spread(words: np.ndarray, half: int) -> np.ndarray:
    """prmt.b32 d, word, 0, SPREAD_SELECTORS[half]: codes 2·half and 2·half + 1 into the high bytes of two lanes."""
    selector = fp8_rows.SPREAD_SELECTORS[half]
    source = np.stack([(words >> (8 * i)) & 0xFF for i in range(4)] + [np.zeros_like(words)] * 4, -1)
    return sum(source[..., (selector >> (4 * i)) & 0x7] << (8 * i) for i in range(4)).astype(np.uint32)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_the_integer_conversion_gives_every_code_its_f16(fmt):
    codes = np.arange(256, dtype=np.uint32)
    words = codes | (codes[::-1] << 8) | (codes << 16) | (codes[::-1] << 24)
    want = np.array([FORMATS[fmt].decode(int(c)) for c in codes])
    for half in (0, 1):
        spread = _spread(words, half)
        if fmt == "e4m3":  # the kernel's: spread - ((spread >> 1) & MAGNITUDE_MASK), the value · 2^-8
            spread = (spread - ((spread >> 1) & fp8_rows.MAGNITUDE_MASK)).astype(np.uint32)
        with np.errstate(invalid="ignore"):  # e5m2's NaN codes
            got = _f16_pair(spread).astype(np.float64) * (fp8_rows.E4M3_ALU_SCALE if fmt == "e4m3" else 1.0)
        for column, which in ((0, codes), (1, codes[::-1])):  # each word: code c, then 255 - c, twice
            expected = want[which]
            finite = np.isfinite(expected)
            assert np.array_equal(got[finite, column], expected[finite]), (fmt, half, column)
            if fmt == "e5m2":  # infinities and NaNs are f16's own
                assert np.array_equal(got[~finite, column], expected[~finite], equal_nan=True)


def test_the_k_permutation_multiplies_each_stored_k_once():
    """The generated comment's map, laid into mma m16n8k16's fragments (PTX ISA: lane (g, t) holds A[g][2t, 2t+1],
    A[g+8][2t, 2t+1], A[g][2t+8, 2t+9], A[g+8][2t+8, 2t+9] and B[2t, 2t+1][g], B[2t+8, 2t+9][g]), equals W·Vᵀ."""
    rng = np.random.default_rng(0)
    w, v = rng.normal(size=(16, 64)), rng.normal(size=(8, 64))  # one tile, one vector block, one chunk
    total = np.zeros((16, 8))
    for s in range(4):  # mma s takes word s of each lane's 16 codes: codes 4s .. 4s + 3
        a, b = np.zeros((16, 16)), np.zeros((16, 8))
        for g in range(8):
            for t in range(4):
                stored = 16 * t + 4 * s
                a[g, 2 * t:2 * t + 2], a[g + 8, 2 * t:2 * t + 2] = w[g, stored:stored + 2], w[g + 8, stored:stored + 2]
                a[g, 2 * t + 8:2 * t + 10], a[g + 8, 2 * t + 8:2 * t + 10] = w[g, stored + 2:stored + 4], w[g + 8, stored + 2:stored + 4]
                b[2 * t:2 * t + 2, g], b[2 * t + 8:2 * t + 10, g] = v[g, stored:stored + 2], v[g, stored + 2:stored + 4]
        total += a @ b
    assert np.allclose(total, w @ v.T)
    assert "w_h[2 * j][2 * s], w_h[2 * j + 1][2 * s], w_h[2 * j][2 * s + 1], w_h[2 * j + 1][2 * s + 1]" in \
        fp8_rows.render(Fp8GemvSpec(4, 64, 64), Fp8GemvConfig()).code


# --- no GPU: NVRTC and SASS ------------------------------------------------------------------------------
CONVERTS = (("cvt", "cvt"), ("alu", "cvt"), ("alu", "alu"))
SHAPES = ((1, 4096, 4096), (2, 136, 528), (5, 7, 16), (16, 4096, 4096), (16, 136, 528), (9, 14336, 4096))


@pytest.mark.parametrize("m, n, k", SHAPES)
def test_every_shape_and_conversion_compiles_without_spills(m, n, k, tmp_path):
    from gemmtune.compiler import compile_kernel

    for fmt, scaling, bias, out in (("e4m3", "tensor", False, "bf16"), ("e5m2", "rowwise", True, "fp16"),
                                    ("e4m3", "rowwise", True, "fp32")):
        spec = Fp8GemvSpec(m, n, k, fmt, scaling, out, bias)
        for w_convert, a_convert in CONVERTS:
            config = default_config(spec).with_(w_convert=w_convert, a_convert=a_convert)
            for arch in ("sm_89", "sm_90"):
                compiled = compile_kernel(fp8_rows.render(spec, config, arch), arch, cache_dir=tmp_path)
                assert compiled.resources.spills == 0 and compiled.resources.stack_bytes == 0, (spec, config, arch)


@pytest.mark.parametrize("config", [Fp8GemvConfig(tiles=2, unroll=4), Fp8GemvConfig(warps_per_output=32, unroll=1),
                                    Fp8GemvConfig(warps_per_output=4, unroll=8), Fp8GemvConfig(tiles=4, unroll=2)])
def test_other_block_shapes_compile_for_sm_100_too(config, tmp_path):
    from gemmtune.compiler import compile_kernel

    spec = Fp8GemvSpec(16, 1000, 4112, "e4m3", "rowwise")
    for arch in ("sm_90", "sm_100"):
        assert compile_kernel(fp8_rows.render(spec, config, arch), arch, cache_dir=tmp_path).resources.spills == 0


def test_sass_multiplies_on_tensor_cores_with_a_steps_loads_in_flight(tmp_path):
    from sass_dump import sass as dump_sass

    from gemmtune.compiler import compile_kernel

    spec = Fp8GemvSpec(16, 14336, 4096, "e4m3", "rowwise")
    config = default_config(spec)
    compiled = compile_kernel(fp8_rows.render(spec, config, "sm_90"), "sm_90", cache_dir=tmp_path)
    sass = dump_sass(tmp_path, compiled.cubin)
    ops = [line.split(";")[0].split("*/")[-1].strip() for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", line)]
    assert any(op.startswith("HMMA.16816.F32") for op in ops)
    assert any("F2FP.F16.E4M3.UNPACK_B" in op for op in ops)
    assert not any(re.match(r"(@\S+ )?(LDL|STL)", op) for op in ops), "local memory"
    first_mma = next(i for i, op in enumerate(ops) if "HMMA" in op)
    loads = [op for op in ops[:first_mma] if re.match(r"(@\S+ )?LDG", op)]
    per_step = config.unroll * (2 * config.tiles + spec.vector_blocks)
    assert len(loads) >= per_step, f"{len(loads)} loads before the first mma; a step has {per_step}"


def test_scaled_mm_shapes_on_meta_tensors_take_the_decode_spec():
    torch = pytest.importorskip("torch")
    from gemmtune.grouped.fp8_gemv import decode_spec
    from gemmtune.grouped.scaled_ops import scaled_mm

    a = torch.empty(4, 512, dtype=torch.float8_e4m3fn, device="meta")
    w = torch.empty(1000, 512, dtype=torch.float8_e4m3fn, device="meta")
    out = scaled_mm(a, w.t(), torch.empty(4, 1, device="meta"), torch.empty(1, 1000, device="meta"))
    assert out.shape == (4, 1000) and out.dtype == torch.bfloat16
    assert decode_spec(4, 1000, 512, "e4m3", "rowwise", "bf16", False) == Fp8GemvSpec(4, 1000, 512, "e4m3", "rowwise")
    assert decode_spec(17, 1000, 512, "e4m3", "rowwise", "bf16", False) is None  # the grouped wgmma kernel's
    assert decode_spec(4, 1000, 512, "e4m3", "block", "bf16", False) is None


def test_scaled_mm_takes_torch_keywords_on_meta_tensors():
    """torch._scaled_mm's keywords: use_fast_accum is accepted (the sums stay promoted), scale_result refused in
    one line (it scales an fp8 D, which gemmtune does not write)."""
    torch = pytest.importorskip("torch")
    from gemmtune.errors import SpecError
    from gemmtune.grouped.scaled_ops import scaled_mm

    a = torch.empty(300, 512, dtype=torch.float8_e4m3fn, device="meta")
    w = torch.empty(1000, 512, dtype=torch.float8_e4m3fn, device="meta")
    sa, sb = torch.empty(300, 1, device="meta"), torch.empty(1, 1000, device="meta")
    out = scaled_mm(a, w.t(), sa, sb, out_dtype=torch.float16, use_fast_accum=True)
    assert out.shape == (300, 1000) and out.dtype == torch.float16
    with pytest.raises(SpecError, match="scale_result scales an fp8 output"):
        scaled_mm(a, w.t(), sa, sb, scale_result=torch.empty(1, device="meta"))


# --- on a GPU ----------------------------------------------------------------------------------------------
def _fp8_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


def _operands(torch, m: int, n: int, k: int, fmt: str, scaling: str, seed: int):
    """A (M, K) and W (N, K) as fp8 codes with float32 scales (amax / largest: one, or per row of A and of W),
    and the float64 values of the codes."""
    dtype = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for rows in (m, n):
        x = torch.randn(rows, k, generator=gen, device="cuda", dtype=torch.float64)
        x[:, ::7] *= 30.0  # outlier columns
        amax = x.abs().amax() if scaling == "tensor" else x.abs().amax(dim=1, keepdim=True)
        scale = (amax / torch.finfo(dtype).max).clamp_min(1e-12).float()
        codes = (x / scale.double()).to(dtype)
        out += [codes, scale.reshape(-1).contiguous(), codes.double()]
    return out


def _reference(a64, sa, w64, sb, bias):
    ref = (a64 * sa.double().reshape(-1, 1)) @ (w64 * sb.double().reshape(-1, 1)).t()
    return ref + bias.double() if bias is not None else ref


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("scaling", ["tensor", "rowwise"])
@pytest.mark.parametrize("k", [4096, 528, 16])
@pytest.mark.parametrize("n", [4096, 136, 7])
@pytest.mark.parametrize("m", [1, 2, 5, 16])
def test_fp8_gemv_matches_the_float64_reference(m, n, k, fmt, scaling):
    if not _fp8_gpu():
        pytest.skip("needs an sm_89+ GPU and torch")
    import torch

    from gemmtune.grouped.fp8_gemv import build
    from gemmtune.verify import compare

    a, sa, a64, w, sb, w64 = _operands(torch, m, n, k, fmt, scaling, seed=m * 7 + n + k)
    with_bias = (m + n) % 2 == 1
    bias = torch.randn(n, device="cuda").to(torch.bfloat16) if with_bias else None
    ref = _reference(a64, sa, w64, sb, bias)
    spec = Fp8GemvSpec(m, n, k, fmt, scaling, "bf16", with_bias)
    configs = [default_config(spec)]
    if n == 136:  # every conversion and a two-tile block on the shapes whose last tile is partial
        configs += [default_config(spec).with_(w_convert=wc, a_convert=ac) for wc, ac in CONVERTS]
        configs += [Fp8GemvConfig(tiles=2, unroll=2)]
    for config in dict.fromkeys(configs):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        build(spec, config)(a.data_ptr(), w.data_ptr(), sa.data_ptr(), sb.data_ptr(), out.data_ptr(),
                            bias.data_ptr() if bias is not None else None, torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        # bf16's tolerance: the reference holds the fp8 values exactly, so what differs is the fp32 sums and D's rounding
        result = compare(out.double(), ref, "bf16", k)
        assert result.ok, f"{config.describe()}: {result.message}"


@pytest.mark.gpu
@pytest.mark.parametrize("scaling", ["tensor", "rowwise"])
@pytest.mark.parametrize("m", [1, 16])
def test_scaled_mm_routes_decode_here_and_matches_torch(m, scaling):
    if not _fp8_gpu():
        pytest.skip("needs an sm_89+ GPU and torch")
    import torch

    from gemmtune.grouped import fp8_gemv
    from gemmtune.grouped.scaled_ops import scaled_mm

    n, k = 2048, 4096
    a, sa, _, w, sb, _ = _operands(torch, m, n, k, "e4m3", scaling, seed=3)
    sa, sb = (sa.reshape(1, 1), sb.reshape(1, 1)) if scaling == "tensor" else (sa.reshape(m, 1), sb.reshape(1, n))
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    want = torch._scaled_mm(a, w.t(), sa, sb, bias=bias, out_dtype=torch.bfloat16)
    got = scaled_mm(a, w.t(), sa, sb, bias, torch.bfloat16)
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2 * want.float().abs().max().item())
    assert any(key[0] == Fp8GemvSpec(m, n, k, "e4m3", scaling, "bf16", True) for key in fp8_gemv._kernels)


@pytest.mark.gpu
def test_scaled_mm_decode_replays_in_a_cuda_graph():
    if not _fp8_gpu():
        pytest.skip("needs an sm_89+ GPU and torch")
    import torch

    from gemmtune.grouped.scaled_ops import scaled_mm

    m, n, k = 4, 4096, 4096
    a, sa, a64, w, sb, w64 = _operands(torch, m, n, k, "e4m3", "rowwise", seed=5)
    sa, sb = sa.reshape(m, 1), sb.reshape(1, n)
    scaled_mm(a, w.t(), sa, sb)  # built before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = scaled_mm(a, w.t(), sa, sb)
    for seed in (11, 12):
        fresh, fresh_sa, fresh64, *_ = _operands(torch, m, 16, k, "e4m3", "rowwise", seed=seed)
        a.copy_(fresh)
        sa.copy_(fresh_sa.reshape(m, 1))
        graph.replay()
        torch.cuda.synchronize()
        want = _reference(fresh64, fresh_sa, w64, sb, None)
        torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())


SANITIZED = textwrap.dedent("""
    import numpy as np
    from gemmtune.grouped.fp8_gemv import build
    from gemmtune.kernels.gemv.fp8_config import Fp8GemvConfig, Fp8GemvSpec, default_config
    from gemmtune.runtime import DeviceBuffer, synchronize

    rng = np.random.default_rng(0)
    for m, n, k, fmt, scaling, bias in ((1, 7, 16, "e4m3", "tensor", False), (5, 136, 528, "e5m2", "rowwise", True),
                                        (16, 301, 1040, "e4m3", "rowwise", True), (9, 4099, 4096, "e4m3", "tensor", True)):
        spec = Fp8GemvSpec(m, n, k, fmt, scaling, "bf16", bias)
        codes = lambda rows: (rng.integers(0, 0x70, (rows, k)) | (rng.integers(0, 2, (rows, k)) << 7)).astype(np.uint8)
        a, w = DeviceBuffer.from_numpy(codes(m)), DeviceBuffer.from_numpy(codes(n))  # exact sizes: memcheck sees any overrun
        sa = DeviceBuffer.from_numpy(np.ones(m if scaling == "rowwise" else 1, np.float32))
        sb = DeviceBuffer.from_numpy(np.ones(n if scaling == "rowwise" else 1, np.float32))
        b = DeviceBuffer.from_numpy(np.zeros(n, np.uint16)) if bias else None
        d = DeviceBuffer.alloc(m * n * 2)
        for config in (default_config(spec), Fp8GemvConfig(tiles=2, unroll=2, w_convert="alu")):
            build(spec, config)(int(a), int(w), int(sa), int(sb), int(d), int(b) if b else None)
            synchronize()
    print("sanitized")
""")


@pytest.mark.gpu
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck", "initcheck"])
def test_compute_sanitizer_is_clean_on_odd_shapes(tool, tmp_path):
    if not _fp8_gpu():
        pytest.skip("needs an sm_89+ GPU")
    sanitizer = shutil.which("compute-sanitizer") or next(
        (str(p) for p in (Path("/usr/local/cuda/bin/compute-sanitizer"),) if p.exists()), None)
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not installed")
    script = tmp_path / "sanitized.py"
    script.write_text(SANITIZED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "3", sys.executable, str(script)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0 and "sanitized" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
