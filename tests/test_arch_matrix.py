"""Every arch × every dtype its hardware has gives a kernel with no config given (issue 66), through the
chooser, build(), `gemmtune show` and `gemmtune export`, on square, odd, skinny and decode shapes, within
each arch's own limits (gemmtune.arch: 64 KB of shared memory a block on sm_75, the T4).

No GPU: the chooser's pick is rendered for every case, and compiled by NVRTC for one odd shape per arch
and dtype (the PTX of the older archs also runs on the H100/H200: tests/test_gpu_ptx_archs.py)."""
from __future__ import annotations

import itertools

import pytest

from gemmtune.arch import arch_limits
from gemmtune.build import build, chosen_config
from gemmtune.spec import GemmSpec

# The dtypes each arch's tensor cores (or CUDA cores, fp32) run: sm_75 has no tf32 or bf16.
ARCH_DTYPES = {"sm_75": ("fp32", "fp16"),
               **{arch: ("fp32", "tf32", "fp16", "bf16") for arch in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")}}
SHAPES = {"square": (1024, 1024, 1024), "large square": (4096, 4096, 4096), "odd": (1000, 1000, 1000),
          "odd, long K": (257, 1023, 4104), "skinny N": (5000, 300, 2048), "N 128": (4096, 128, 4096),
          "decode": (1, 4096, 4096), "decode, 16 rows": (16, 4096, 4096), "one column": (4096, 1, 4096),
          "tiny odd": (7, 301, 77)}
LAYOUTS = ("nn", "nt", "tn", "tt")


def _fits(source, arch: str) -> list[str]:
    """Why the launch shape breaks the arch's limits (static shared memory is checked after compiling)."""
    limits = arch_limits(arch)
    problems = []
    if source.threads > 1024:
        problems.append(f"{source.threads} threads a block")
    if source.dynamic_smem > limits.smem_per_block:
        problems.append(f"{source.dynamic_smem} B of dynamic shared memory over {limits.smem_per_block}")
    return problems


@pytest.mark.parametrize("arch", list(ARCH_DTYPES))
def test_every_dtype_shape_and_layout_gets_a_kernel(arch):
    failed = []
    for dtype, (name, (m, n, k)), layout in itertools.product(ARCH_DTYPES[arch], SHAPES.items(), LAYOUTS):
        spec = GemmSpec(m, n, k, layout, dtype)
        try:
            family, chosen = chosen_config(spec, None, arch, None)
            problems = _fits(family.render(spec, chosen.config, arch), arch)
        except Exception as err:  # noqa: BLE001 - every failure of the matrix is listed, not the first
            problems = [f"{type(err).__name__}: {err}"]
        failed += [f"{arch} {dtype} {layout} {name} {m}x{n}x{k}: {p}" for p in problems]
    assert not failed, "\n".join(failed)


@pytest.mark.slow
@pytest.mark.parametrize("arch,dtype", [(a, d) for a, ds in ARCH_DTYPES.items() for d in ds])
def test_build_compiles_the_pick_within_the_arch_limits(arch, dtype):
    kernel = build(GemmSpec(257, 1023, 4104, "nt", dtype), arch=arch)
    smem = kernel.resources.shared_bytes + kernel.compiled.source.dynamic_smem
    assert smem <= arch_limits(arch).smem_per_block and kernel.resources.registers <= 255


def test_t4_fp32_compiles_every_shape():
    """The original brief's GPU and type: fp32 on sm_75 (no cp.async: slices staged through registers)."""
    for name, (m, n, k) in SHAPES.items():
        kernel = build(GemmSpec(m, n, k, "nn", "fp32"), arch="sm_75")
        assert "cp.async" not in kernel.compiled.ptx, name  # the instruction (comments may name it)
        assert kernel.resources.shared_bytes + kernel.compiled.source.dynamic_smem <= arch_limits("sm_75").smem_per_block, name


def test_show_and_export_on_a_t4(tmp_path, capsys):
    from gemmtune.cli import main

    assert main(["show", "MNK=1024", "--arch", "sm_75"]) in (0, None)
    shown = capsys.readouterr().out
    assert "__global__" in shown and "registers" in shown
    assert main(["export", "M=1000", "N=1000", "K=1000", "--arch", "sm_75", "--out", str(tmp_path / "t4")]) in (0, None)
    assert list((tmp_path / "t4").glob("*.cubin")) and list((tmp_path / "t4").glob("*.cuh"))


def test_ptx_image_is_the_older_archs_code_for_the_jit():
    """compiler.ptx_image: the PTX of an sm_75 build, NUL-terminated for cuModuleLoadData, as compute_75;
    an arch-specific (sm_90a) build has none to give."""
    from gemmtune.compiler import ptx_image
    from gemmtune.errors import CompileError

    kernel = build(GemmSpec(257, 1023, 520, "nt", "fp16"), arch="sm_75")
    image = ptx_image(kernel.compiled)
    assert image.arch == "compute_75" and image.cubin.endswith(b"\0") and b".target sm_75" in image.cubin
    assert image.resources == kernel.resources and image.source == kernel.compiled.source
    with pytest.raises(CompileError):
        ptx_image(build(GemmSpec(256, 256, 256, "nt", "bf16"), arch="sm_90a").compiled)
