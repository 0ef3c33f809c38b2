"""fp8 GemmSpecs (issue 70) without a GPU: validation and keys, the inputs and float64 reference verify uses,
the fp8 tolerance, the registry's fp8 family (the grouped kernel with one group) compiled with NVRTC, and the
command line's flags and one-line refusals."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from gemmtune import fp8
from gemmtune.cli import main
from gemmtune.dtypes import round_to
from gemmtune.errors import ConfigError, SpecError
from gemmtune.kernels import families, family_for, family_of_config, get_family
from gemmtune.spec import GemmSpec, spec_from_words, stable_hash
from gemmtune.verify import compare, make_inputs, reference, tolerance


def fp8_spec(m=300, n=136, k=544, dtype="e4m3", scaling="rowwise", **kw) -> GemmSpec:
    return GemmSpec(m, n, k, "nt", dtype, scaling=scaling, **kw)


# --- the spec -----------------------------------------------------------------------------------------
def test_fp8_spec_fields_names_and_json():
    spec = fp8_spec(scaling="block", out_dtype="fp16", epilogue="bias_col+gelu")
    assert (spec.fp8, spec.element_bytes, spec.out_dtype, spec.scaling) == (True, 1, "fp16", "block")
    assert spec.short() == "300x136x544 nt e4m3/block->fp16 bias_col+gelu"
    assert spec.slug() == "gemm_e4m3_block_outfp16_nt_300x136x544_bias_col_gelu"
    assert spec.to_json()["scaling"] == "block" and GemmSpec.from_json(spec.to_json()) == spec
    assert fp8_spec(dtype="e5m2").out_dtype == "bf16"  # the default D of fp8 inputs
    assert fp8_spec(out_dtype="fp32").slug() == "gemm_e4m3_rowwise_outfp32_nt_300x136x544"  # D in fp32 too
    assert spec.storage_dtype("A") == "e4m3" and spec.storage_dtype("scale_b") == "fp32"
    assert spec.storage_dtype("offs") == "int32" and spec.storage_dtype("bias") == "fp16"
    assert spec.min_bytes == (300 * 544 + 544 * 136) + 2 * (300 * 136 + 136)
    assert fp8_spec().key() != fp8_spec(scaling="tensor").key() != fp8_spec(dtype="e5m2", scaling="tensor").key()


@pytest.mark.parametrize("spec, key", [
    (GemmSpec(4096, 4096, 4096), "ec902b195791182e"),
    (GemmSpec(1, 4096, 4096, "nt", "bf16", "bias_col+gelu"), "be609e7dfb9e475c"),
    (GemmSpec(77, 136, 544, "tn", "fp16", out_dtype="fp32"), "f020acae20cf4ea6"),
    (GemmSpec(64, 64, 64, math="3xtf32"), "08f865f5cc0e22a7")])
def test_other_specs_keep_their_json_and_keys(spec, key):
    # the keys of commit 22cd663 (before fp8 specs): tuning databases are keyed on them
    assert "scaling" not in spec.to_json() and spec.scaling == "none"
    assert spec.key() == key == stable_hash(spec.to_json())
    assert GemmSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("kwargs, message", [
    (dict(dtype="e4m3"), "e4m3 needs a scaling: choose tensor, rowwise, block"),
    (dict(dtype="e5m2", scaling="columnwise"), "scaling 'columnwise' is unknown"),
    (dict(dtype="bf16", scaling="rowwise"), "scaling rowwise is for fp8 inputs"),
    (dict(dtype="fp32", scaling="tensor"), "scaling tensor is for fp8 inputs"),
    (dict(dtype="e4m3", scaling="tensor", layout="nn"), "e4m3 takes layout nt only .*K-major"),
    (dict(dtype="e4m3", scaling="tensor", layout="tn"), "not tn"),
    (dict(dtype="e4m3", scaling="tensor", out_dtype="e4m3"), "unknown out dtype"),
    (dict(dtype="e4m3", scaling="tensor", math="simt"), "math simt applies to fp32 inputs"),
    (dict(dtype="e3m4", scaling="tensor"), "unknown dtype 'e3m4'"),
])
def test_bad_fp8_specs_are_one_line_spec_errors(kwargs, message):
    kwargs = {"layout": "nt", **kwargs}
    with pytest.raises(SpecError, match=message) as caught:
        GemmSpec(64, 64, 64, **kwargs)
    assert "\n" not in str(caught.value)


def test_words_take_nt_for_fp8_when_no_layout_is_given():
    assert spec_from_words(["MNK=64"], layout=None, dtype="e4m3", scaling="tensor").layout == "nt"
    assert spec_from_words(["MNK=64"], layout=None, dtype="bf16").layout == "nn"
    assert spec_from_words(["MNK=64"], dtype="e5m2", scaling="block", layout=None).scaling == "block"
    with pytest.raises(SpecError, match="layout nt only"):
        spec_from_words(["MNK=64"], layout="nn", dtype="e4m3", scaling="tensor")


# --- inputs, reference and tolerance --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
def test_codes_round_trip_and_refuse_values_that_are_not_fp8(name):
    values = fp8.round_fp8(np.random.default_rng(0).normal(size=4000) * 50, name)
    codes = fp8.encode(values, name)
    assert codes.dtype == np.uint8 and np.array_equal(fp8.decode_codes(codes, name), values)
    assert fp8.encode(np.array([0.0, -0.0, fp8.FORMATS[name].largest]), name).tolist()[:2] == [0, 0]
    with pytest.raises(SpecError, match="not finite"):
        fp8.encode(np.array([0.3]), name)  # between two fp8 values
    with pytest.raises(SpecError, match="not finite"):
        fp8.encode(np.array([np.nan]), name)


@pytest.mark.parametrize("scaling, scale_a, scale_b", [("tensor", (1,), (1,)), ("rowwise", (77,), (136,)),
                                                       ("block", (77, 5), (2, 5))])
def test_inputs_are_laid_out_as_the_kernel_reads_them(scaling, scale_a, scale_b):
    spec = fp8_spec(77, 136, 544, scaling=scaling, epilogue="bias_col")
    inputs = make_inputs(spec, np.random.default_rng(3))
    assert inputs["A"].shape == (77, 544) and inputs["B"].shape == (136, 544)  # B stored N×K (layout nt)
    assert inputs["scale_a"].shape == scale_a and inputs["scale_b"].shape == scale_b
    assert inputs["scale_a"].dtype == inputs["scale_b"].dtype == np.float32
    assert inputs["offs"].tolist() == [77] and inputs["bias"].shape == (136,)
    assert np.array_equal(fp8.round_fp8(inputs["A"], "e4m3"), inputs["A"])  # exactly fp8 values
    largest = fp8.FORMATS["e4m3"].largest
    assert np.abs(inputs["A"]).max() == largest and np.abs(inputs["B"]).max() == largest
    if scaling != "tensor":
        assert np.ptp(np.log2(inputs["scale_a"])) > 2  # scales that differ between rows or blocks


@pytest.mark.parametrize("scaling", ["tensor", "rowwise", "block"])
def test_reference_is_the_product_of_the_dequantized_operands(scaling):
    spec = fp8_spec(77, 136, 544, dtype="e5m2", scaling=scaling, epilogue="bias_col+relu")
    inputs = make_inputs(spec, np.random.default_rng(4))
    sa, sb = inputs["scale_a"].astype(np.float64), inputs["scale_b"].astype(np.float64)
    if scaling == "block":  # by hand: each 128-long piece of K with its row's and its block's scale
        want = sum((inputs["A"][:, kb * 128:(kb + 1) * 128] * sa[:, kb:kb + 1])
                   @ (inputs["B"][:, kb * 128:(kb + 1) * 128] * np.repeat(sb[:, kb], 128)[:136, None]).T
                   for kb in range(5))
    elif scaling == "rowwise":
        want = (inputs["A"] * sa[:, None]) @ (inputs["B"] * sb[:, None]).T
    else:
        want = inputs["A"] @ inputs["B"].T * sa[0] * sb[0]
    want = np.maximum(want + inputs["bias"][None, :], 0.0)
    np.testing.assert_allclose(reference(spec, inputs, use_gpu=False), want, rtol=1e-12, atol=1e-9)


def test_fp8_tolerance_admits_a_right_kernel_and_not_a_wrong_scale():
    spec = fp8_spec(300, 136, 4096, scaling="rowwise")
    inputs = make_inputs(spec, np.random.default_rng(5))
    ref = reference(spec, inputs, use_gpu=False)
    assert tolerance("e4m3", 4096, "bf16") > tolerance("bf16", 4096)  # fp8 wgmma keeps fewer bits of its sums
    assert compare(round_to(ref, "bf16").astype(np.float64), ref, spec.dtype, spec.k, spec.out_dtype).ok
    wrong = ref.copy()
    wrong[17] *= inputs["scale_a"][18] / inputs["scale_a"][17]  # one row scaled by its neighbour's scale
    result = compare(wrong, ref, spec.dtype, spec.k, spec.out_dtype)
    assert not result.ok and "(17," in result.message


# --- the family --------------------------------------------------------------------------------------
def test_fp8_specs_go_to_the_grouped_family_and_others_do_not():
    spec = fp8_spec()
    family = family_for(spec, "sm_90a")
    assert family.name == "fp8_grouped" and get_family("fp8_grouped") is family
    assert family not in families()  # the general families' list (every epilogue, layout, dtype) is as it was
    assert family_of_config(family.default_config(spec, "sm_90a")) is family
    assert family_for(GemmSpec(300, 136, 544, "nt", "bf16"), "sm_90a").name == "wgmma"
    assert "fp8_grouped" in family.supports(GemmSpec(64, 64, 64, "nt", "bf16"), "sm_90a")
    with pytest.raises(ConfigError, match="family wgmma cannot run .* not e4m3"):
        family_for(spec, "sm_90a", "wgmma")
    assert family_for(spec, "sm_89").name == "mma"  # mma.sync's m16n8k32 fp8 (issue 70)
    with pytest.raises(ConfigError, match="fp8 wgmma and TMA need a Hopper GPU"):
        family_for(spec, "sm_86")
    with pytest.raises(ConfigError, match="K=40 must be a multiple of 16"):
        family_for(fp8_spec(k=40), "sm_90a")
    with pytest.raises(ConfigError, match="epilogue 'relu\\+add': add unsupported"):
        family_for(fp8_spec(epilogue="relu+add"), "sm_90a")


def test_family_space_points_to_the_candidate_list():
    with pytest.raises(ConfigError, match="no combinatorial search space: 'gemmtune tune' times the grouped kernel's"):
        get_family("fp8_grouped").space()


@pytest.mark.parametrize("scaling, k, unpromoted", [("tensor", 4096, False), ("rowwise", 14336, False),
                                                    ("tensor", 1024, True), ("block", 4096, False)])
def test_space_lists_what_tune_times_and_only_accurate_fp8_configs(scaling, k, unpromoted, capsys):
    """`gemmtune space` of an fp8 GEMM prints the candidates `tune` times, the default first; with tensor/rowwise
    scales none lets wgmma's accumulator run past the default's promotion interval (8 k-blocks of 128), so an
    unpromoted config is offered only where K fits one interval."""
    from gemmtune.grouped.as_gemm import Fp8GemmConfig
    from gemmtune.grouped.config import DEFAULT_PROMOTE_EVERY, candidates, keeps_fp8_accuracy
    from gemmtune.tune.grouped_tuner import spec_for_gemm

    grouped = spec_for_gemm(fp8_spec(m=4096, n=4096, k=k, scaling=scaling))[0]
    assert main(["space", "M=4096", "N=4096", f"K={k}", "--dtype", "e4m3", "--scale", scaling, "--layout", "nt"]) == 0
    out = capsys.readouterr().out
    found = candidates(grouped)
    assert f"fp8_grouped candidates for 4096x4096x{k} nt e4m3/{scaling}: {len(found)}," in out
    assert out.splitlines()[1].split(None, 1)[1] == Fp8GemmConfig.of(found[0]).describe()
    assert any(c.promote_every == 0 for c in found) == (unpromoted or scaling == "block")
    assert all(keeps_fp8_accuracy(c, grouped) for c in found)
    if scaling != "block":
        assert all(0 < c.promote_every <= DEFAULT_PROMOTE_EVERY or k <= 128 * DEFAULT_PROMOTE_EVERY for c in found)
        assert keeps_fp8_accuracy(found[0].with_(promote_every=0), grouped) == (k <= 1024)


def test_config_round_trip_and_ladder():
    family = get_family("fp8_grouped")
    config = family.default_config(fp8_spec(scaling="block"), "sm_90a")
    assert family.config_from_json(config.to_json()) == config and config.key() == stable_hash(config.to_json())
    assert config.with_(stages=3).stages == 3 and type(config.with_(stages=3)) is type(config)
    assert "128x128" in config.describe()
    for scaling in ("tensor", "rowwise", "block"):
        for name, step in family.ladder("sm_90a"):
            assert not family.rejections(step, fp8_spec(scaling=scaling), "sm_90a"), (name, scaling)
    with pytest.raises(ValueError, match="unknown fp8_grouped config keys"):
        family.config_from_json({"bm": 64, "colour": 1})


SHAPES = [(1, 136, 4096), (77, 136, 544), (300, 1000, 4096), (4096, 4096, 208)]


@pytest.mark.parametrize("dtype, scaling, epilogue", [("e4m3", "tensor", "none"), ("e5m2", "rowwise", "bias_col+gelu"),
                                                      ("e4m3", "block", "relu"), ("e5m2", "block", "bias_col")])
def test_fp8_kernels_render_carry_the_spec_and_compile_without_spills(dtype, scaling, epilogue, tmp_path):
    from gemmtune.compiler import compile_kernel

    family = get_family("fp8_grouped")
    for shape in SHAPES:
        spec = GemmSpec(*shape, "nt", dtype, epilogue, scaling=scaling)
        source = family.render(spec, family.default_config(spec, "sm_90a"), "sm_90a")
        assert source.spec == spec and source.family == "fp8_grouped" and source.arch_specific
        assert source.args[:1] == ("offs",) and {"scale_a", "scale_b", "D"} <= set(source.args)
        assert ("bias" in source.args) == ("bias_col" in epilogue)
        assert f".{dtype}.{dtype}" in source.code and "constexpr int GROUPS = 1" in source.code
        assert [t.dtype for t in source.tensor_maps] == [dtype, dtype]
        compiled = compile_kernel(source, "sm_90a", cache_dir=tmp_path)
        assert compiled.resources.spills == 0, (spec.short(), compiled.resources.summary())


def test_build_gives_the_ordinary_kernel_and_refuses_calls_on_arrays():
    from gemmtune import build

    kernel = build(fp8_spec(scaling="tensor"), arch="sm_90a")
    assert kernel.family == "fp8_grouped" and kernel.spec == fp8_spec(scaling="tensor")
    with pytest.raises(SpecError, match="calling a built kernel on arrays does not support fp8"):
        kernel(None, None)


# --- the command line ----------------------------------------------------------------------------------
def test_show_prints_the_fp8_kernel(capsys):
    assert main(["show", "MNK=4096", "--dtype", "e4m3", "--scale", "rowwise", "--arch", "sm_90a"]) == 0
    out = capsys.readouterr().out
    assert "wgmma.mma_async.sync.aligned.m64n" in out and ".e4m3.e4m3" in out and 'extern "C" __global__' in out
    assert "// kernel   grouped_g1_m4096_n4096_k4096_e4m3_rowwise_bf16" in out
    assert "(4096x4096x4096 nt e4m3/rowwise)" in out and "// config   fp8_grouped:" in out
    assert "// ptxas    sm_90a:" in out and "0 B spill stores" in out
    assert main(["show", "M=77", "N=136", "K=544", "--dtype", "e5m2", "--scale", "block", "--out-dtype", "fp16",
                 "--no-code", "--explain", "--arch", "sm_90a"]) == 0
    out = capsys.readouterr().out
    assert "e5m2/block->fp16" in out and "fp8_grouped" in out and "decode GEMV" not in out


@pytest.mark.parametrize("args, noted", [(("M=8", "--scale", "rowwise", "--epilogue", "bias_col"), True),
                                         (("M=16", "--scale", "tensor"), True), (("M=17", "--scale", "tensor"), False),
                                         (("M=8", "--scale", "block"), False),
                                         (("M=8", "--scale", "tensor", "--epilogue", "bias_col+gelu"), False)])
def test_show_says_when_scaled_mm_runs_the_decode_gemv(args, noted, capsys):
    """scaled_mm takes M <= 16 with per-tensor or rowwise scales (and at most a bias) to the fp8 GEMV, not to the
    grouped kernel show builds: show says so there, and only there."""
    assert main(["show", args[0], "N=4096", "K=4096", *args[1:], "--dtype", "e4m3", "--no-code", "--arch", "sm_90a"]) == 0
    assert ("runs this shape on the fp8 decode GEMV" in capsys.readouterr().out) == noted


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gemmtune.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, message", [
    (("show", "MNK=64", "--dtype", "bf16", "--scale", "rowwise"), "scaling rowwise is for fp8 inputs"),
    (("show", "MNK=64", "--dtype", "e4m3"), "e4m3 needs a scaling"),
    (("show", "MNK=64", "--dtype", "e4m3", "--scale", "tensor", "--layout", "nn"), "takes layout nt only"),
    (("show", "MNK=64", "--dtype", "e4m3", "--scale", "block", "--out-dtype", "e5m2"), "unknown out dtype 'e5m2'"),
    (("show", "M=64", "N=64", "K=40", "--dtype", "e4m3", "--scale", "tensor", "--arch", "sm_90a"), "multiple of 16"),
    (("show", "MNK=64", "--dtype", "e4m3", "--scale", "tensor", "--arch", "sm_80"), "need a Hopper GPU"),
    (("show", "MNK=64", "--dtype", "e4m3", "--scale", "tensor", "--family", "mma", "--arch", "sm_86"), "sm_89 or newer"),
    (("tune", "MNK=64", "--dtype", "e4m3", "--scale", "tensor", "--simulate", "x.csv"), "--simulate replays"),
    (("export", "MNK=64", "--dtype", "e4m3", "--scale", "tensor", "--arch", "sm_80", "--out", "{tmp}/x"),
     "export them for sm_90a"),
    (("bench", "MNK=64", "--dtype", "e4m3", "--scale", "tensor", "--accuracy"), "bench --accuracy does not support fp8"),
    (("ladder", "MNK=64", "--dtype", "e4m3", "--scale", "tensor", "--backend", "numba"), "the numba backend does not"),
    (("ladder", "MNK=64", "--dtype", "e4m3", "--scale", "tensor", "--backend", "tvm"), "the TVM backend does not"),
    (("tvm", "show-cuda", "MNK=64", "--dtype", "e5m2", "--scale", "block"), "the TVM backend does not support fp8"),
    (("tune", "MNK=64", "--dtype", "e4m3", "--scale", "tensor", "--backend", "tvm"), "the TVM backend does not"),
])
def test_bad_fp8_command_lines_exit_2_with_one_line(args, message, tmp_path):
    out = run_cli(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "x").exists()


def test_baselines_are_skipped_for_fp8_with_a_reason():
    from gemmtune.baselines import resolve

    chosen, skipped = resolve(None, fp8_spec())
    assert chosen == [] and skipped and all("no fp8 baseline" in s.reason for s in skipped)


# --- evaluate's fp8 path on the fake driver (tests/fake_driver.py) ------------------------------------------
def _python_fp8_gemm(spec: GemmSpec, wrong_block: bool = False):
    """A 'kernel' reading (A, B, offs, scale_a, scale_b, D) as the fp8 kernel does: codes, one int32 row count,
    float32 scales laid out as fp8.gemm_inputs says; D in bf16. `wrong_block`: B's block scales read as if
    stored (KB, NB), the transposed layout."""
    import ctypes

    from fake_driver import device_array, param_pointer

    from gemmtune.dtypes import from_storage, to_storage

    kb, nb = -(-spec.k // 128), -(-spec.n // 128)
    shapes = {"tensor": ((1,), (1,)), "rowwise": ((spec.m,), (spec.n,)), "block": ((spec.m, kb), (nb, kb))}

    def kernel(params: int) -> None:
        a, b = (from_storage(device_array(param_pointer(params, i), s, ctypes.c_uint8), spec.dtype)
                for i, s in ((0, spec.a_shape), (1, spec.b_shape)))
        assert device_array(param_pointer(params, 2), (1,), ctypes.c_int32)[0] == spec.m
        sa_shape, sb_shape = shapes[spec.scaling]
        if wrong_block:
            sb_shape = sb_shape[::-1]
        sa, sb = (device_array(param_pointer(params, i), s).astype(np.float64) for i, s in ((3, sa_shape), (4, sb_shape)))
        inputs = {"A": a, "B": b, "scale_a": sa, "scale_b": sb.T if wrong_block else sb}
        product = fp8.dequantized_operands(spec, inputs)
        out = to_storage((product[0] @ product[1].T).astype(np.float32), "bf16")
        device_array(param_pointer(params, 5), (spec.m, spec.n), ctypes.c_uint16)[:] = out
    return kernel


@pytest.mark.parametrize("scaling", ["tensor", "rowwise", "block"])
def test_evaluate_uploads_codes_scales_and_row_count(scaling, monkeypatch):
    from fake_driver import FakeDriver, installed

    from gemmtune.compiler import CompiledKernel, ResourceUsage
    from gemmtune.evaluate import evaluate
    from gemmtune.kernel_source import KernelSource
    from gemmtune.timing import TimingProtocol

    spec = fp8_spec(77, 300, 544, dtype="e5m2", scaling=scaling)
    kernels = {"fp8": _python_fp8_gemm(spec), "fp8_wrong": _python_fp8_gemm(spec, wrong_block=True)}
    with installed(monkeypatch, FakeDriver(kernels)) as fake:
        for entry in kernels:
            source = KernelSource("// python", entry, (1, 1, 1), (128, 1, 1),
                                  ("A", "B", "offs", "scale_a", "scale_b", "D"), spec, "fake", "1")
            compiled = CompiledKernel(source, "sm_90a", b"cubin", "", ResourceUsage(32, 0, 0, 0, 0), "", 0.0, "13.0")
            result = evaluate(compiled, TimingProtocol(warmup=1, min_reps=3, max_reps=5, min_time_s=0.0),
                              np.random.default_rng(6))
            right = entry == "fp8" or scaling != "block"  # the wrong layout differs only for block scales
            assert result.ok == right, (entry, result.verify.message)
        assert fake.memory == {}
