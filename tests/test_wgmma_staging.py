"""CPU: wgmma's staged operands (stage_operands): which operands are copied and how, the constraint's
reasons, the tensor maps over the workspace, the artifact's description of the copies (JSON and the
exported launcher), and the chooser's candidates and estimate."""
import json
from dataclasses import replace

import pytest

from gemmtune.chooser import rank
from gemmtune.chooser.candidates import candidates
from gemmtune.chooser.features import row_alignment
from gemmtune.errors import ConfigError
from gemmtune.export.header import header_text
from gemmtune.kernel_source import KernelSource, StagedOperand
from gemmtune.kernels import family_for, get_family
from gemmtune.kernels.wgmma.config import (default_config, default_staging, staged_operands, staging_choice,
                                           staging_seconds)
from gemmtune.spec import GemmSpec

FAMILY = get_family("wgmma")


def test_which_operands_are_staged_and_their_pitch():
    # nt bf16, K = 1003: both A (M×K) and B (N×K) rows are 2006 bytes
    spec = GemmSpec(1001, 3001, 1003, "nt", "bf16")
    assert staged_operands(spec) == (StagedOperand("A", 1001, 2006, 2048), StagedOperand("B", 3001, 2006, 2048))
    assert staging_choice(spec) == (True,)
    # nn: A's rows hold K values (1000 bf16: 2000 B, 16 bytes off a sector), B's rows N (4096: aligned)
    spec = GemmSpec(512, 4096, 1000, "nn", "bf16")
    assert staged_operands(spec) == (StagedOperand("A", 512, 2000, 2048),)
    assert staging_choice(spec) == (False, True)
    # tf32 rows of 4097 values; every row on a 32-byte boundary stages nothing
    assert staged_operands(GemmSpec(64, 64, 4097, "nt", "tf32"))[0].pitch == 16512
    assert staging_choice(GemmSpec(4096, 4096, 4096, "nt", "bf16")) == (False,)
    assert staging_choice(GemmSpec(4096, 4096, 4112, "nt", "bf16")) == (False,)  # 8224 B: 32-byte multiple


def test_the_constraint_names_its_reason():
    unaligned, aligned = GemmSpec(77, 13, 5, "nn", "bf16"), GemmSpec(256, 256, 256, "nt", "bf16")
    config = default_config(unaligned)
    assert config.stage_operands and "staged" in config.describe()
    assert "multiple of 16" in FAMILY.rejections(config.with_(stage_operands=False), unaligned, "sm_90a")["staging"]
    assert "32-byte" in FAMILY.rejections(default_config(aligned).with_(stage_operands=True), aligned, "sm_90a")["staging"]
    assert FAMILY.supports(unaligned, "sm_90a") is None
    with pytest.raises(ConfigError, match="multiple of 16"):
        FAMILY.render(unaligned, config.with_(stage_operands=False), "sm_90a")


def test_tensor_maps_read_the_workspace_and_the_artifact_describes_the_copies():
    spec = GemmSpec(1000, 1001, 1003, "tn", "fp16")  # A stored K×M (rows of 2000 B), B stored K×N (2002 B)
    source = FAMILY.render(spec, default_config(spec), "sm_90a")
    maps = {t.name: t for t in source.tensor_maps}
    assert maps["tma_A"].strides == (2048,) and maps["tma_B"].strides == (2048,)
    assert maps["tma_A"].dims == (1000, 1003) and maps["tma_B"].dims == (1001, 1003)  # extents stop at the row's end
    assert [s.operand for s in source.staged] == ["A", "B"]
    again = KernelSource.from_json(json.loads(json.dumps(source.to_json())))
    assert again.staged == source.staged
    # unstaged kernels keep their JSON as before (no "staged" key)
    plain = GemmSpec(1024, 1024, 1024, "nt", "bf16")
    assert "staged" not in FAMILY.render(plain, default_config(plain), "sm_90a").to_json()


def test_the_exported_launcher_copies_into_its_workspace():
    spec = GemmSpec(127, 129, 131, "nt", "bf16")
    source = FAMILY.render(spec, default_config(spec), "sm_90a")
    text = header_text("staged_gemm", source, "sm_90a")
    assert "cudaMalloc(&staged_A, (size_t)48768)" in text and "cudaMalloc(&staged_B, (size_t)49536)" in text
    # one launch of the staging kernel: 127 + 129 rows of 17 chunks, 256 threads a block
    assert "cudaLaunchKernel(staged_gemm_kernel::wgmma_bf16_nt_127x129x131_stage" in text
    assert "dim3(17), dim3(256)" in text and "cudaMemcpy2DAsync" not in text
    assert "static_cast<const void*>(staged_A)" in text and "static_cast<const void*>(A))" not in text
    # a source from before the staging kernel: one cudaMemcpy2DAsync per operand
    old = header_text("staged_gemm", replace(source, stage_kernel=False), "sm_90a")
    assert "cudaMemcpy2DAsync(staged_A, 384, A, 262," in old and "cudaMemcpy2DAsync(staged_B, 384, B, 262," in old
    assert "_stage" not in old.split("inline cudaError_t")[1]


def test_the_staging_kernel_is_in_the_source_and_the_resource_report_is_the_gemms():
    from gemmtune.compiler import parse_resource_report

    spec = GemmSpec(1001, 3001, 1003, "nt", "bf16")
    source = FAMILY.render(spec, default_config(spec), "sm_90a")
    assert source.stage_kernel and f"void __launch_bounds__(256) {source.entry}_stage(" in source.code
    assert KernelSource.from_json(json.loads(json.dumps(source.to_json()))).stage_kernel
    assert not FAMILY.render(GemmSpec(512, 512, 512, "nt", "bf16"), default_config(GemmSpec(512, 512, 512, "nt", "bf16")),
                             "sm_90a").stage_kernel
    log = ("ptxas info    : Function properties for k_stage\nptxas info    : Used 29 registers, 0 bytes stack frame, "
           "0 bytes spill stores, 0 bytes spill loads\nptxas info    : Function properties for k\n"
           "ptxas info    : Used 168 registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n")
    assert parse_resource_report(log, "k").registers == 168
    assert parse_resource_report(log, "k_stage").registers == 29


def test_default_staging_stages_16_byte_off_rows_only_where_the_copies_are_a_small_share():
    # H100 (bench/results/2026-11-26-h100-staging.md): staged 223 µs against 339 in place at
    # 8192x8192x1032; in place faster at 4096x4096x4104 (209 against 223), 4096x4096x4100 tf32, 1000^3,
    # 257x1023x4104, 200x300x504.
    wide = GemmSpec(8192, 8192, 1032, "nt", "bf16")
    in_place = [GemmSpec(4096, 4096, 4104, "nt", "bf16"), GemmSpec(4096, 4096, 4100, "nt", "tf32"),
                GemmSpec(1000, 1000, 1000, "nt", "bf16"), GemmSpec(257, 1023, 4104, "nt", "bf16"),
                GemmSpec(200, 300, 504, "nt", "bf16")]
    assert all(staging_choice(s) == (False, True) for s in [wide, *in_place])
    assert default_staging(wide)
    assert not any(default_staging(s) for s in in_place)
    big = in_place[0]
    assert staging_seconds(GemmSpec(4096, 4096, 4096, "nt", "bf16")) == 0.0
    assert staging_seconds(big) > 2 * 2 * 4096 * 8208 / 3e12


def test_the_chooser_stages_where_needed_and_weighs_the_choice_elsewhere():
    unaligned = GemmSpec(1001, 3001, 1003, "nt", "bf16")
    assert family_for(unaligned, "sm_90a").name == "wgmma"
    assert all(c.stage_operands for c in candidates("wgmma", unaligned, "sm_90a", 132))
    off = GemmSpec(4096, 4096, 4104, "nt", "bf16")
    found = candidates("wgmma", off, "sm_90a", 132)
    assert {c.stage_operands for c in found} == {False, True}
    assert len(found) == 2 * len([c for c in found if c.stage_operands])
    # the model sees a staged config's rows as 128-byte aligned; the unstaged ones as they are
    assert row_alignment(off, found[0].with_(stage_operands=True))[0] == 128
    assert row_alignment(off, found[0].with_(stage_operands=False))[0] == 16
    picks = rank(off, "sm_90a", 132)
    same = {p.config.with_(stage_operands=False): p.predicted_s for p in picks if not p.config.stage_operands}
    for p in picks:
        if p.config.stage_operands and p.config.with_(stage_operands=False) in same:
            assert p.predicted_s != same[p.config.with_(stage_operands=False)]


def test_the_registry_passes_wgmma_over_where_the_copies_would_not_pay():
    from gemmtune.kernels.wgmma.config import yields_to_mma

    tiny, big = GemmSpec(127, 129, 131, "nn", "bf16"), GemmSpec(1001, 3001, 1003, "nt", "bf16")
    assert "mma family" in yields_to_mma(tiny, "sm_90a") and family_for(tiny, "sm_90a").name == "mma"
    assert yields_to_mma(big, "sm_90a") is None and family_for(big, "sm_90a").name == "wgmma"
    assert family_for(tiny, "sm_90a", "wgmma").name == "wgmma"  # asked for by name, it runs it
    assert yields_to_mma(GemmSpec(200, 300, 504, "nt", "bf16"), "sm_90a") is None  # staging optional there
