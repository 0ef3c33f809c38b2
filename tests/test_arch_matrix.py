"""Every arch × every dtype its hardware has gives a kernel with no config given (issue 66), through the
chooser, build(), `gemmtune show` and `gemmtune export`, on square, odd, skinny and decode shapes and every
layout, within each arch's own limits (gemmtune.arch: 64 KB of shared memory a block and 1024 threads an SM
on sm_75, the T4; 64K registers an SM everywhere).

No GPU: the chooser's pick is rendered for every case (fast); NVRTC compiles an odd and a decode shape of
every arch and dtype, and every T4 fp32 shape (fast), and every case's pick (`slow`: about 1,000 distinct
kernels, ~90 s on 2 cores with a cold cache). The PTX of the older archs also runs on the H100/H200:
tests/test_gpu_ptx_archs.py."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from gemmtune.arch import arch_limits, device_of_arch, geometry
from gemmtune.build import build, chosen_config, compile_configs
from gemmtune.device import DeviceInfo
from gemmtune.runtime import resource_problems
from gemmtune.spec import GemmSpec

# The dtypes each arch's tensor cores (or CUDA cores, fp32) run: sm_75 has no tf32 or bf16.
ARCH_DTYPES = {"sm_75": ("fp32", "fp16"),
               **{arch: ("fp32", "tf32", "fp16", "bf16") for arch in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")}}
SHAPES = {"square": (1024, 1024, 1024), "large square": (4096, 4096, 4096), "odd": (1000, 1000, 1000),
          "odd, long K": (257, 1023, 4104), "skinny N": (5000, 300, 2048), "N 128": (4096, 128, 4096),
          "decode": (1, 4096, 4096), "decode, 16 rows": (16, 4096, 4096), "one column": (4096, 1, 4096),
          "tiny odd": (7, 301, 77)}
LAYOUTS = ("nn", "nt", "tn", "tt")
FAST_COMPILED = ("odd, long K", "decode")  # compiled for every arch and dtype without the slow mark


@dataclass(frozen=True)
class Case:
    arch: str
    name: str  # the shape's name in SHAPES
    spec: GemmSpec

    def label(self) -> str:
        return f"{self.arch} {self.spec.dtype} {self.spec.layout} {self.name} {self.spec.m}x{self.spec.n}x{self.spec.k}"


def cases(arch: str, names: tuple[str, ...] = tuple(SHAPES)) -> list[Case]:
    return [Case(arch, name, GemmSpec(*SHAPES[name], layout, dtype))
            for dtype, name, layout in itertools.product(ARCH_DTYPES[arch], names, LAYOUTS)]


def arch_gpu(arch: str) -> DeviceInfo:
    """The arch table's GPU as the runtime's DeviceInfo, so the runtime's own load checks judge the kernel."""
    limits = arch_limits(arch)
    major, minor = divmod(int(arch.removeprefix("sm_")), 10)
    return DeviceInfo(0, limits.gpu, (major, minor), limits.sm_count, 1024, 48 * 1024, limits.smem_per_block,
                      limits.smem_per_sm, 65536, limits.regs_per_sm, 0, 0, "13.0")


def launch_problems(source, arch: str) -> list[str]:
    """Why the launch shape breaks the arch's limits (static shared memory is known after compiling)."""
    limits = arch_limits(arch)
    problems = []
    if source.threads > min(1024, limits.threads_per_sm):
        problems.append(f"{source.threads} threads a block (the SM holds {limits.threads_per_sm})")
    if source.dynamic_smem > limits.smem_per_block:
        problems.append(f"{source.dynamic_smem} B of dynamic shared memory over {limits.smem_per_block}")
    return problems


def compiled_problems(compiled, arch: str) -> list[str]:
    """What the runtime would refuse on the arch's GPU (threads, shared memory, registers at the warp
    granularity the hardware allocates), plus spills (the picks are meant to run without)."""
    problems = launch_problems(compiled.source, arch) + resource_problems(compiled, arch_gpu(arch))
    if compiled.resources.spills:
        problems.append(f"{compiled.resources.spills} B spilled")
    return problems


def pick_problems(case: Case) -> list[str]:
    try:
        family, chosen = chosen_config(case.spec, None, case.arch, None)
        return launch_problems(family.render(case.spec, chosen.config, case.arch), case.arch)
    except Exception as err:  # noqa: BLE001 - every failure of the matrix is listed, not the first
        return [f"{type(err).__name__}: {err}"]


def compile_problems(found: list[Case]) -> list[str]:
    """Each case's pick compiled (each distinct kernel once, in parallel) and judged by compiled_problems."""
    jobs = {}
    for case in found:
        _, chosen = chosen_config(case.spec, None, case.arch, None)
        jobs.setdefault((case.spec, chosen.config, case.arch), []).append(case)
    failed = []
    for (_, _, arch), result, named in zip(jobs, compile_configs(list(jobs)), jobs.values()):
        problems = [f"{type(result).__name__}: {result}"] if isinstance(result, Exception) else compiled_problems(result, arch)
        failed += [f"{case.label()}: {p}" for case in named for p in problems]
    return failed


@pytest.mark.parametrize("arch", list(ARCH_DTYPES))
def test_every_dtype_shape_and_layout_gets_a_kernel(arch):
    failed = [f"{case.label()}: {p}" for case in cases(arch) for p in pick_problems(case)]
    assert not failed, "\n".join(failed)


def test_an_odd_and_a_decode_shape_compile_within_every_arch_limits():
    found = [case for arch in ARCH_DTYPES for case in cases(arch, FAST_COMPILED)]
    failed = compile_problems(found)
    assert not failed, "\n".join(failed)


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(ARCH_DTYPES))
def test_every_pick_compiles_within_the_arch_limits(arch):
    failed = compile_problems(cases(arch))
    assert not failed, "\n".join(failed)


def test_compiled_problems_sees_a_t4s_limits():
    """The judge itself: a pick for an H100 (cp.async aside) breaks the T4's 64 KB and 1024 threads an SM."""
    kernel = build(GemmSpec(4096, 4096, 4096, "nt", "bf16"), arch="sm_80")
    assert kernel.resources.shared_bytes + kernel.compiled.source.dynamic_smem > 64 * 1024
    assert any("shared memory" in p for p in compiled_problems(kernel.compiled, "sm_75"))
    assert not compiled_problems(kernel.compiled, "sm_80")


def test_t4_fp32_compiles_every_shape():
    """The original brief's GPU and type: fp32 on sm_75 (no cp.async: slices staged through registers)."""
    for name, (m, n, k) in SHAPES.items():
        kernel = build(GemmSpec(m, n, k, "nn", "fp32"), arch="sm_75")
        assert "cp.async" not in kernel.compiled.ptx, name  # the instruction (comments may name it)
        assert not compiled_problems(kernel.compiled, "sm_75"), name


@pytest.mark.parametrize("arch", list(ARCH_DTYPES))
def test_show_and_export_on_every_arch(arch, tmp_path, capsys):
    from gemmtune.cli import main

    assert main(["show", "MNK=1024", "--arch", arch]) in (0, None)  # fp32: on sm_75 it failed before 5e286ad
    shown = capsys.readouterr().out
    assert "__global__" in shown and "registers" in shown
    out = tmp_path / arch
    assert main(["export", "M=257", "N=1023", "K=4104", "--dtype", "fp16", "--layout", "tn", "--arch", arch,
                 "--out", str(out)]) in (0, None)
    assert list(out.glob("*.cubin")) and list(out.glob("*.cuh"))


# --- building for another GPU than the present one ------------------------------------------------
@dataclass(frozen=True)
class FakeDevice:
    name: str
    arch: str
    sm_count: int = 132


def test_a_present_gpu_of_another_arch_is_not_the_target():
    """On an H200, a build for sm_75 is chosen for the T4 of the arch table (40 SMs, its tuning records),
    not for the H200's 132 SMs and records; a GPU of the target's arch (sm_90 for sm_90a) answers for itself."""
    h200 = FakeDevice("NVIDIA H200", "sm_90")
    assert device_of_arch(h200, "sm_75") is None and device_of_arch(h200, "sm_90a") is h200
    assert geometry(h200, "sm_75").sm_count == 40 and geometry(h200, "sm_90a").source == "device NVIDIA H200"


def test_tuning_records_of_the_present_gpu_do_not_choose_another_arch(monkeypatch):
    import sys
    import types

    from gemmtune.export.config_source import choose_config

    asked = []
    monkeypatch.setitem(sys.modules, "gemmtune.tune.db", types.SimpleNamespace(
        best_known_trial=lambda spec, target, db_path=None, family=None: asked.append(target)))
    choose_config(GemmSpec(1024, 1024, 1024), "sm_75", FakeDevice("NVIDIA H200", "sm_90"))
    assert asked == ["sm_75"]  # the arch's records, not the H200's


# --- the PTX of a build, for GPUs of that compute capability or newer -------------------------------
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


def test_build_gives_the_ptx_image_when_asked():
    spec = GemmSpec(1000, 1000, 1000, "nn", "fp32")
    kernel = build(spec, arch="sm_75", ptx=True)
    assert kernel.arch == "compute_75" and kernel.compiled.cubin == build(spec, arch="sm_75").compiled.ptx.encode() + b"\0"
