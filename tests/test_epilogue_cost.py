"""The fused epilogue's own cost (issue 67), without a GPU: what the wgmma write-back compiles to
(NVRTC, sm_90a SASS: the hardware tanh, the bias read once per column and never by a predicated
load, the instructions an output element costs) and the chooser's estimate of it."""
from __future__ import annotations

import dataclasses
import re
from collections import Counter

import pytest

from gemmtune.chooser import choose, rank
from gemmtune.chooser.features import GELU_TANHF, OP_COSTS, epilogue_cost
from gemmtune.compiler import compile_kernel
from gemmtune.kernels import get_family
from gemmtune.kernels.wgmma.writeback import BIAS_PAIRS
from gemmtune.spec import GemmSpec

from sass_dump import sass

WGMMA = get_family("wgmma")
# Issue 67's ViT-B MLP up-projection: before this change the fused kernel ran 87.5 µs against 47.6
# plain (H200); its write-back called tanhf (about 22 instructions and two MUFU an element) and read
# the bias per accumulator through predicated loads, a round trip per 7 (the predicate registers).
ISSUE_SHAPE = (6304, 3072, 768)


def _ops(text: str) -> Counter:
    """Opcode counts of a SASS listing (predicated instructions under their opcode, and again under
    '@P <opcode>')."""
    ops = Counter()
    for line in text.splitlines():
        match = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if match:
            ops[match.group(2)] += 1
            if match.group(1):
                ops["@P " + match.group(2).split(".")[0]] += 1
    return ops


def _compiled(tmp_path, spec: GemmSpec, config, bias_pairs: bool = False):
    """The kernel's resources and SASS opcodes; `bias_pairs`: the bias read as if every slice lay
    inside D with an aligned vector (the path every slice but the edge takes), the other path dropped."""
    source = WGMMA.render(spec, config, "sm_90a")
    if bias_pairs:
        assert f"if ({BIAS_PAIRS})" in source.code
        source = dataclasses.replace(source, code=source.code.replace(f"if ({BIAS_PAIRS})", "if (true)"))
    compiled = compile_kernel(source, "sm_90a", tmp_path)
    return compiled.resources, _ops(sass(tmp_path, compiled.cubin))


def _write_back_elements(ops: Counter) -> int:
    """Output elements a thread's write-back code holds: each stmatrix .x4 stores four 32-bit words,
    eight 16-bit outputs."""
    return 8 * ops["STSM.16.M88.4"]


@pytest.mark.parametrize("out_dtype", ["bf16", "fp16"])
def test_gelu_is_one_hardware_tanh_an_element_and_the_bias_is_never_a_predicated_load(tmp_path, out_dtype):
    spec = GemmSpec(*ISSUE_SHAPE, "nt", out_dtype, "bias_col+gelu")
    config = choose(spec, "sm_90a").config
    assert config.stmatrix and config.bn // config.store_slices <= 128  # the staged write-back
    resources, ops = _compiled(tmp_path, spec, config)
    elements = _write_back_elements(ops)
    assert elements > 0 and resources.spills == 0
    assert ops["MUFU.TANH"] == elements  # one a GELU; libm's tanhf was MUFU.EX2 + MUFU.RCP and ~20 more
    assert ops["MUFU.EX2"] == 0
    assert ops["@P LDG"] == 0  # every load of a slice in flight at once
    # pairs of 16-bit bias values, each read once for the thread's two rows of its column (the edge
    # path reads single values: another 2 per 4 outputs)
    assert ops["LDG.E"] == elements // 4


def test_fused_write_back_costs_what_the_chooser_counts(tmp_path):
    """The chooser's per-element costs (features.OP_COSTS) are this kernel's instructions: the fused
    write-back's, less the plain kernel's, per output element, on the path every slice inside D takes.
    Before this change the same count was 26.3 (tanhf and a guarded bias load per accumulator)."""
    plain = GemmSpec(*ISSUE_SHAPE, "nt", "bf16")
    config = choose(plain, "sm_90a").config
    plain_resources, plain_ops = _compiled(tmp_path, plain, config)
    fused_resources, fused_ops = _compiled(tmp_path, GemmSpec(*ISSUE_SHAPE, "nt", "bf16", "bias_col+gelu"), config,
                                           bias_pairs=True)
    assert fused_resources.registers <= plain_resources.registers and fused_resources.spills == 0
    per_element = (sum(fused_ops.values()) - sum(plain_ops.values())) / _write_back_elements(fused_ops)
    counted = OP_COSTS["bias_col"].issue + OP_COSTS["gelu"].issue
    assert abs(per_element - counted) < 0.5, per_element


@pytest.mark.parametrize("m,n,k", [ISSUE_SHAPE, (6304, 768, 3072), (4096, 4096, 1024)])
def test_fused_predictions_add_the_epilogue_and_plain_ones_do_not(m, n, k):
    plain = rank(GemmSpec(m, n, k, "nt", "bf16"), "sm_90a")
    assert all(p.epilogue is None for p in plain) and "epilogue" not in plain[0].why()
    costs = {}
    for epilogue in ("bias_col", "bias_col+relu", "bias_col+gelu"):
        pick = rank(GemmSpec(m, n, k, "nt", "bf16", epilogue), "sm_90a")[0]
        cost = pick.epilogue
        assert cost is not None and cost.work_s > 0 and cost.memory_s == 0  # no C
        assert f"epilogue +{cost.seconds * 1e6:.1f} µs" in pick.why()
        costs[epilogue] = cost.seconds
    assert costs["bias_col"] < costs["bias_col+relu"] < costs["bias_col+gelu"]
    assert plain[0].predicted_s < choose(GemmSpec(m, n, k, "nt", "bf16", "bias_col"), "sm_90a").predicted_s


def test_the_estimate_is_deterministic_and_follows_the_gelu_of_the_output_type():
    spec = GemmSpec(*ISSUE_SHAPE, "nt", "bf16", "bias_col+gelu")
    config = choose(spec, "sm_90a").config
    assert epilogue_cost(spec, config, 132) == epilogue_cost(spec, config, 132)
    fast = epilogue_cost(spec, config, 132)
    accurate = epilogue_cost(dataclasses.replace(spec, out_dtype="fp32"), config, 132)
    assert fast.mufu == 1 and accurate.mufu == GELU_TANHF.mufu and accurate.work_s > 2 * fast.work_s
    # the busiest SM's tiles: 792 tiles of 192x128 on 132 SMs (the wave-fit rule's pick), 6 of them
    assert (config.bm, config.bn) == (192, 128) and fast.elements_per_sm == 6 * 192 * 128
    assert epilogue_cost(spec.without_epilogue(), config, 132) is None


def test_c_costs_its_bytes_only_past_the_model_time():
    """C is streamed under the main loop: a compute-bound GEMM hides it, a memory-bound one pays its
    bytes at HBM speed (at most)."""
    big = GemmSpec(4096, 4096, 4096, "nt", "bf16", "add")
    config = choose(big, "sm_90a").config
    assert epilogue_cost(big, config, 132, model_s=200e-6).memory_s == 0
    c_seconds = 4096 * 4096 * 2 / 3.0e12
    assert epilogue_cost(big, config, 132, model_s=1e-6).memory_s == pytest.approx(c_seconds)
    for spec in (GemmSpec(4096, 4096, 16, "nt", "bf16", "add"), GemmSpec(16, 4096, 4096, "nt", "bf16", "add")):
        assert choose(spec, "sm_90a").predicted_s >= spec.min_bytes / 3.0e12  # never below reading it all once
