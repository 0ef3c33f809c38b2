"""Gated (SwiGLU) GEMMs, D = silu(A·Wgᵀ) ⊙ (A·Wuᵀ): the spec, the interleaved weight, the reference, the
wgmma kernel (NVRTC for sm_90a without a GPU; on a Hopper GPU against float64), the chooser and the torch op."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from gemmtune.cli.common import add_spec_arguments, spec_from_args
from gemmtune.epilogue import deinterleave_gate_up, interleave_gate_up, swiglu64
from gemmtune.errors import ConfigError, SpecError
from gemmtune.kernels import family_for, get_family
from gemmtune.kernels.wgmma.schedule import schedule_for
from gemmtune.spec import GemmSpec, spec_from_words
from gemmtune.verify import make_inputs, reference

WGMMA = get_family("wgmma")


def gated(m: int, n: int, k: int, dtype: str = "bf16", **kw) -> GemmSpec:
    return GemmSpec(m, n, k, "nt", dtype, gated=True, **kw)


# --- the spec ------------------------------------------------------------------------------------------
def test_spec_json_round_trip_and_key():
    spec = gated(37, 760, 136)
    assert spec.to_json()["gated"] is True
    assert GemmSpec.from_json(spec.to_json()) == spec
    plain = GemmSpec(37, 760, 136, "nt", "bf16")
    assert "gated" not in plain.to_json()  # plain specs keep the JSON (and keys) they had
    assert GemmSpec.from_json({"m": 37, "n": 760, "k": 136, "layout": "nt", "dtype": "bf16"}) == plain
    assert spec.key() != plain.key() and spec.slug() != plain.slug() and "gated" in spec.short()


def test_spec_shapes_and_counts():
    spec = gated(300, 1024, 4096)
    assert spec.gemm_n == 2048 and spec.b_shape == (2048, 4096)
    assert spec.flops == 2 * 300 * 2048 * 4096
    assert spec.ungated() == GemmSpec(300, 2048, 4096, "nt", "bf16")
    assert spec.without_epilogue() == spec


def test_spec_words_and_cli_flag():
    assert spec_from_words(["M=4", "N=16", "K=8", "gated=1"], layout=None, dtype="bf16") == gated(4, 16, 8)
    parser = argparse.ArgumentParser()
    add_spec_arguments(parser)
    args = parser.parse_args(["M=4", "N=16", "K=8", "--dtype", "fp16", "--layout", "nt", "--gated"])
    assert spec_from_args(args) == gated(4, 16, 8, "fp16")


@pytest.mark.parametrize("change, words", [
    (dict(n=12), "N a multiple of 8"),
    (dict(dtype="fp32"), "bf16 or fp16"),
    (dict(layout="nn"), "layout nt only"),
    (dict(epilogue="relu"), "no epilogue yet"),
])
def test_spec_rejections_are_one_line(change, words):
    args = {"m": 4, "n": 16, "k": 8, "layout": "nt", "dtype": "bf16", "gated": True, **change}
    with pytest.raises(SpecError, match=words) as info:
        GemmSpec(**args)
    assert "\n" not in str(info.value)


def test_other_families_and_archs_refuse():
    spec = gated(37, 760, 136)
    assert family_for(spec, "sm_90a").name == "wgmma"
    assert family_for(gated(1, 8, 64), "sm_90a").name == "wgmma"  # not gemv, which would run the plain product
    with pytest.raises(ConfigError, match="runs no gated"):
        family_for(spec, "sm_90a", "mma")
    with pytest.raises(ConfigError, match="no generator family supports"):
        family_for(spec, "sm_80")


# --- the weight and the reference -------------------------------------------------------------------
def test_interleave_round_trip_numpy():
    rng = np.random.default_rng(0)
    w_gate, w_up = rng.standard_normal((24, 5)), rng.standard_normal((24, 5))
    w_gu = interleave_gate_up(w_gate, w_up)
    assert w_gu.shape == (48, 5)
    assert np.array_equal(w_gu[0:8], w_gate[0:8]) and np.array_equal(w_gu[8:16], w_up[0:8])
    assert np.array_equal(w_gu[16:24], w_gate[8:16]) and np.array_equal(w_gu[40:48], w_up[16:24])
    back = deinterleave_gate_up(w_gu)
    assert np.array_equal(back[0], w_gate) and np.array_equal(back[1], w_up)
    with pytest.raises(SpecError, match="multiple of 8"):
        interleave_gate_up(w_gate[:12], w_up[:12])


def test_interleave_round_trip_torch():
    torch = pytest.importorskip("torch")
    import gemmtune.torch as gt

    w_gate, w_up = torch.randn(24, 5), torch.randn(24, 5)
    w_gu = gt.interleave_gate_up(w_gate, w_up)
    assert np.array_equal(w_gu.numpy(), interleave_gate_up(w_gate.numpy(), w_up.numpy()))
    g, u = gt.deinterleave_gate_up(w_gu)
    assert torch.equal(g, w_gate) and torch.equal(u, w_up)


def test_reference_is_silu_gate_times_up():
    spec = gated(37, 24, 136)
    inputs = make_inputs(spec, np.random.default_rng(1))
    assert inputs["B"].shape == (48, 136)
    a = inputs["A"].astype(np.float64)
    w_gate, w_up = deinterleave_gate_up(inputs["B"].astype(np.float64))
    g, u = a @ w_gate.T, a @ w_up.T
    expected = g / (1 + np.exp(-g)) * u
    np.testing.assert_allclose(reference(spec, inputs, use_gpu=False), expected, rtol=1e-12, atol=1e-12)


def test_swiglu64_saturates_without_nan():
    out = swiglu64(np.array([-1e4, 0.0, 1e4]), np.array([2.0, 3.0, 0.5]))
    assert np.all(np.isfinite(out)) and out[1] == 0.0 and out[2] == 5e3


# --- the wgmma kernel without a GPU ----------------------------------------------------------------------
def test_config_rejections_name_the_reason():
    spec = gated(2048, 1024, 4096)
    base = WGMMA.default_config(spec, "sm_90a")
    assert not WGMMA.rejections(base, spec, "sm_90a")
    overlapped = base.with_(overlap_epilogue=True, store_slices=2)
    assert "overlap_epilogue" in WGMMA.rejections(overlapped, spec, "sm_90a")["gated"]
    narrow = base.with_(bn=128, store_slices=2)  # 64 columns of D in two slices of 64 bytes
    assert "128-byte rows" in WGMMA.rejections(narrow, spec, "sm_90a")["gated"]
    assert "multiple of 16" in WGMMA.rejections(base.with_(bn=72, tma_store=False, store_slices=1), spec, "sm_90a")["gated"]


def test_split_tiles_reduce_by_finishers():
    """A share of a partial tile could cut a gate column from its up column: gated schedules never scatter."""
    spec = gated(96, 96, 65536)
    config = WGMMA.default_config(spec, "sm_90a").with_(bm=64, bn=64, consumers=1, stages=6, tma_store=False,
                                                        store_slices=1)
    assert schedule_for(spec.ungated(), config).scatter
    plan = schedule_for(spec, config)
    assert plan.tail_workers and not plan.scatter
    assert "SHARES_WRITE_D = false" in WGMMA.render(spec, config, "sm_90a").code


def test_chooser_candidates_are_valid_for_the_gated_spec():
    from gemmtune.chooser import rank

    for spec in (gated(1, 8, 64), gated(37, 760, 136, "fp16"), gated(2048, 14336, 4096)):
        picks = rank(spec, "sm_90a")
        assert picks and all(p.family == "wgmma" for p in picks)
        for pick in picks:
            assert not WGMMA.rejections(pick.config, spec, "sm_90a"), pick.config.describe()


def test_kernel_text_compacts_then_writes_back_d():
    spec = gated(300, 760, 4096)
    code = WGMMA.render(spec, WGMMA.default_config(spec, "sm_90a"), "sm_90a").code
    assert "constexpr int M = 300, N = 1520, K = 4096;" in code  # the GEMM runs 2N columns
    assert "constexpr int D_N = 760" in code and "namespace swiglu_out" in code
    assert "swiglu_fragment(acc, gated);" in code and "swiglu_out::store_tile" in code
    maps = {t.name: t for t in WGMMA.render(spec, WGMMA.default_config(spec, "sm_90a"), "sm_90a").tensor_maps}
    assert maps["tma_B"].dims == (4096, 1520) and maps["tma_D"].dims == (760, 300)


def _compile_cases():
    """A few gated configs over the write-back paths: TMA-store slices with stmatrix, without, direct
    stores, ping-pong, one consumer, fp32 D."""
    spec = gated(300, 1024, 4096)
    base = WGMMA.default_config(spec, "sm_90a")
    cases = [(spec, base), (spec, base.with_(stmatrix=True)), (spec, base.with_(tma_store=False, store_slices=1)),
             (spec, base.with_(bn=128, stages=4, pingpong=True, store_slices=1, split_tail=False)),
             (gated(37, 760, 136, "fp16"), WGMMA.default_config(gated(37, 760, 136, "fp16"), "sm_90a").with_(
                 bm=64, bn=128, consumers=1, stages=6, store_slices=1)),
             (gated(2048, 1024, 4096, out_dtype="fp32"), WGMMA.default_config(gated(2048, 1024, 4096, out_dtype="fp32"), "sm_90a"))]
    return cases


@pytest.mark.parametrize("spec, config", _compile_cases(), ids=lambda v: v.short() if isinstance(v, GemmSpec) else v.describe())
def test_gated_kernels_compile_without_spills(spec, config):
    from gemmtune.compiler import compile_kernel

    assert not WGMMA.rejections(config, spec, "sm_90a")
    compiled = compile_kernel(WGMMA.render(spec, config, "sm_90a"), "sm_90a")
    assert compiled.resources.spills == 0, compiled.resources.summary()
    assert compiled.resources.stack_bytes == 0
    assert "Potential Performance Loss" not in compiled.log, compiled.log


def test_backward_matches_autograd_of_the_reference():
    """The op's backward (recomputing both products with torch) against autograd through torch's own
    silu(x·Wgᵀ)·(x·Wuᵀ), in float64 on the CPU."""
    torch = pytest.importorskip("torch")
    from gemmtune.torch.gated import _backward, gated_reference

    x = torch.randn(2, 3, 16, dtype=torch.float64, requires_grad=True)
    w_gu = torch.randn(32, 16, dtype=torch.float64, requires_grad=True)
    out = gated_reference(x, w_gu)
    grad = torch.randn_like(out)
    out.backward(grad)

    class Ctx:
        saved_tensors = (x.detach(), w_gu.detach())
        needs_input_grad = (True, True)

    dx, dw = _backward(Ctx(), grad)
    torch.testing.assert_close(dx, x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dw, w_gu.grad, rtol=1e-5, atol=1e-5)


def test_torch_op_checks_shapes_in_one_line():
    torch = pytest.importorskip("torch")
    import gemmtune.torch as gt

    with pytest.raises(SpecError, match="multiple of 8"):
        gt.gated_linear(torch.zeros(2, 8, dtype=torch.bfloat16), torch.zeros(24, 8, dtype=torch.bfloat16))
    with pytest.raises(SpecError, match="bf16 or fp16"):
        gt.gated_linear(torch.zeros(2, 8), torch.zeros(32, 8))


# --- on a Hopper GPU ------------------------------------------------------------------------------------
GPU_SHAPES = [(1, 8, 64), (37, 760, 136), (300, 1024, 4096), (2048, 14336, 4096), (37, 14336, 64), (300, 760, 136),
              (2048, 1024, 64), (1, 14336, 4096)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gpu_chooser_pick_verifies(shape, dtype):
    from gpu_checks import check_picks, hopper_arch

    check_picks([gated(*shape, dtype)], hopper_arch(), "wgmma", seed=sum(shape))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", [(37, 760, 136), (300, 1024, 4096), (2048, 14336, 4096), (1, 8, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gpu_every_candidate_verifies(shape, dtype):
    from gpu_checks import failed_jobs, hopper_arch

    from gemmtune.chooser import rank

    arch = hopper_arch()
    spec = gated(*shape, dtype)
    jobs = [(spec, pick.config, arch) for pick in rank(spec, arch)]
    jobs += [(spec, config, arch) for _, config in WGMMA.ladder(arch) if not WGMMA.rejections(config, spec, arch)]
    assert not failed_jobs(jobs, lambda s: 7)


def _torch_case(m: int, n: int, k: int, dtype):
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    x = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    w_gate = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).to(dtype)
    w_up = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).to(dtype)
    return x, w_gate, w_up


def _assert_close_to_torch(out, x, w_gate, w_up):
    import torch

    expected = torch.nn.functional.silu(x.double() @ w_gate.double().t()) * (x.double() @ w_up.double().t())
    scale = expected.abs().max().item() or 1.0
    err = (out.double() - expected).abs().max().item() / scale
    assert err < (2e-2 if out.dtype == torch.bfloat16 else 4e-3), err
    eager = torch.nn.functional.silu(x @ w_gate.t()) * (x @ w_up.t())  # torch's own, rounded per op
    assert (out.double() - expected).norm() <= 1.5 * (eager.double() - expected).norm() + 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["bf16", "fp16"])
def test_gpu_torch_op_matches_torch(dtype_name):
    from gpu_checks import hopper_arch

    hopper_arch()
    import torch

    import gemmtune.torch as gt

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    for m, n, k in [(1, 8, 64), (37, 760, 136), (300, 1024, 4096)]:
        x, w_gate, w_up = _torch_case(m, n, k, dtype)
        w_gu = gt.interleave_gate_up(w_gate, w_up)
        out = gt.gated_linear(x, w_gu)
        assert out.shape == (m, n) and out.dtype == dtype
        _assert_close_to_torch(out, x, w_gate, w_up)
        out3 = gt.gated_linear(x.view(1, m, k), w_gu)  # leading dims kept
        assert out3.shape == (1, m, n) and torch.equal(out3[0], out)


@pytest.mark.gpu
def test_gpu_torch_compile_fullgraph():
    from gpu_checks import hopper_arch

    hopper_arch()
    import torch

    import gemmtune.torch as gt

    x, w_gate, w_up = _torch_case(37, 760, 136, torch.bfloat16)
    w_gu = gt.interleave_gate_up(w_gate, w_up)

    @torch.compile(fullgraph=True)
    def mlp_up(x, w_gu):
        return gt.gated_linear(x, w_gu) * 2.0

    out = mlp_up(x, w_gu)
    torch.testing.assert_close(out, gt.gated_linear(x, w_gu) * 2.0)


@pytest.mark.gpu
def test_gpu_cuda_graph_replay():
    from gpu_checks import hopper_arch

    hopper_arch()
    import torch

    import gemmtune.torch as gt

    x, w_gate, w_up = _torch_case(300, 1024, 4096, torch.bfloat16)
    w_gu = gt.interleave_gate_up(w_gate, w_up)
    static_x = x.clone()
    gt.gated_linear(static_x, w_gu)  # built and bound outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = gt.gated_linear(static_x, w_gu)
    fresh, _, _ = _torch_case(300, 1024, 4096, torch.bfloat16)
    fresh = fresh.flip(0).contiguous()
    static_x.copy_(fresh)
    static_out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _assert_close_to_torch(static_out, fresh, w_gate, w_up)


@pytest.mark.gpu
def test_gpu_backward_runs():
    from gpu_checks import hopper_arch

    hopper_arch()
    import torch

    import gemmtune.torch as gt

    x, w_gate, w_up = _torch_case(37, 760, 136, torch.bfloat16)
    w_gu = gt.interleave_gate_up(w_gate, w_up).requires_grad_()
    x = x.requires_grad_()
    gt.gated_linear(x, w_gu).float().sum().backward()
    assert x.grad.shape == x.shape and w_gu.grad.shape == w_gu.shape
    assert torch.isfinite(x.grad.float()).all() and torch.isfinite(w_gu.grad.float()).all()


# --- export -------------------------------------------------------------------------------------------
def _exported(tmp_path, spec=None):
    from gemmtune.export.writer import export_source

    spec = spec or gated(37, 760, 136)
    source = WGMMA.render(spec, WGMMA.default_config(spec, "sm_90a"), "sm_90a")
    return spec, export_source(source, tmp_path / "out", "sm_90a", cache_dir=tmp_path / "cache")


def test_export_writes_the_weight_layout_and_a_gated_harness(tmp_path):
    from gemmtune.export.manifest import read_manifest

    spec, result = _exported(tmp_path)
    folder, name = result.path, spec.slug()
    header = (folder / f"{name}.cuh").read_text()
    assert "D = silu(A·Wgᵀ) ⊙ (A·Wuᵀ) for exactly M=37, N=760, K=136" in header
    assert "// B stored 1520×136 = (2N)×K, gate and up rows interleaved by 8" in header
    assert "constexpr int WEIGHT_ROWS = 2 * N;" in header and "constexpr bool gated = true;" in header
    assert "constexpr double flops = 2.0 * M * WEIGHT_ROWS * K;" in header
    harness = (folder / "main.cu").read_text()
    assert "random_device_buffer<__nv_bfloat16>((size_t)K * (2 * N), 2);  // stored 1520×136" in harness
    assert "(size_t)M * N * sizeof(out_t)" in harness  # D is M×N
    assert "(2N)×K: gate and up rows interleaved by 8" in (folder / "README.md").read_text()
    assert read_manifest(folder).spec == spec


def test_export_reference_reads_each_outputs_gate_and_up_rows(tmp_path):
    """The reference kernel's row arithmetic, evaluated here, names the rows interleave_gate_up puts there."""
    import re

    _, result = _exported(tmp_path)
    reference = (result.path / "reference.cuh").read_text()
    line = re.search(r"const int gate_row = (.*), up_row = gate_row \+ (\d+);", reference)
    assert line and "gate += a_p * (double)to_float(B[(size_t)gate_row * K + p]);" in reference
    assert "up += a_p * (double)to_float(B[(size_t)up_row * K + p]);" in reference
    assert "float v = (float)(gate / (1.0 + exp(-gate)) * up);" in reference
    n = 760
    rows = interleave_gate_up(np.arange(n)[:, None], -1 - np.arange(n)[:, None])[:, 0]  # gate j -> j, up j -> -1-j
    for col in range(n):
        gate_row = eval(line.group(1).replace("/", "//"), {"col": col})  # noqa: S307 - integer arithmetic of C text
        assert rows[gate_row] == col and rows[gate_row + int(line.group(2))] == -1 - col


def test_plain_exports_say_they_are_not_gated(tmp_path):
    from gemmtune.export.writer import export_source

    spec = GemmSpec(64, 64, 64, "nt", "bf16")
    source = WGMMA.render(spec, WGMMA.default_config(spec, "sm_90a"), "sm_90a")
    folder = export_source(source, tmp_path / "plain", "sm_90a", cache_dir=tmp_path / "cache").path
    header = (folder / f"{spec.slug()}.cuh").read_text()
    assert "constexpr bool gated = false;" in header and "WEIGHT_ROWS" not in header
    assert "(size_t)K * N, 2);" in (folder / "main.cu").read_text()


def test_export_harness_of_a_gated_gemm_compiles(tmp_path):
    """nvcc (the pip wheel's) compiles main.cu with the launcher and the gated reference; linking needs libcuda
    (the launcher encodes tensor maps), which a machine without a driver lacks: compile only."""
    from gemmtune.export.toolchain import build_harness, find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("no nvcc: pip install 'nvidia-cuda-nvcc>=13.0,<14' 'nvidia-cuda-runtime>=13.0,<14'")
    _, result = _exported(tmp_path, gated(300, 1024, 512))
    assert build_harness(result.path, nvcc, link=False).is_file()


def test_cli_export_gated(tmp_path, capsys, monkeypatch):
    import sys
    import types

    from gemmtune.cli import main

    fake = types.ModuleType("gemmtune.tune.db")
    fake.best_known_trial = lambda spec, arch_or_device, db_path=None, family=None: None
    monkeypatch.setitem(sys.modules, "gemmtune.tune.db", fake)
    out = tmp_path / "kern"
    assert main(["export", "M=64", "N=256", "K=128", "--dtype", "bf16", "--gated", "--arch", "sm_90a",
                 "--out", str(out)]) == 0
    assert "64x256x128 nt bf16 gated" in capsys.readouterr().out
    assert (out / "gemm_bf16_nt_64x256x128_gated.cuh").is_file()
