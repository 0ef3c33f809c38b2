"""GPU (Hopper): wgmma with staged operands (stage_operands: A and/or B copied into rows 128 bytes
apart before each launch, which the TMA loads read) computes the right product.

- Rows TMA cannot read in place (not 16-byte multiples): the registry's pick on sm_90 is the wgmma
  family, staged, in every layout and tensor-core dtype, on odd shapes including M or N = 1.
- Rows 16 bytes off a 32-byte sector (bf16 K = 1000, say): staged and in place, same config.
- Epilogues on odd shapes; a kernel launched twice with new inputs (the workspace is reused).
Checked by the common verifier (float64 reference of the rounded inputs, NaN-poisoned D).
"""
import numpy as np
import pytest

from gemmtune.kernels import get_family
from gemmtune.kernels.wgmma.config import WgmmaConfig, staging_choice
from gemmtune.spec import GemmSpec

from gpu_checks import check_picks, failed_jobs, hopper_arch

pytestmark = pytest.mark.gpu

FAMILY = get_family("wgmma")
LAYOUTS = ("nt", "nn", "tn", "tt")
UNALIGNED = [(1, 1, 1), (7, 13, 5), (127, 129, 131), (1, 257, 131), (131, 1, 257), (17, 1000, 1003),
             (1000, 1001, 1003)]


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_registry_picks_staged_wgmma_for_unaligned_rows(dtype, layout):
    import gemmtune

    arch = hopper_arch()
    specs = [GemmSpec(*shape, layout=layout, dtype=dtype) for shape in UNALIGNED + [(3000, 5000, 1500), (2001, 1999, 2003)]]
    specs = [s for s in specs if staging_choice(s) == (True,) and min(s.m, s.n) > 16]  # gemv takes M, N ≤ 16
    small = [s for s in specs if FAMILY.yields(s, arch)]  # too little work to repay the copies
    specs = [s for s in specs if not FAMILY.yields(s, arch)]
    assert len(specs) >= 2 and len(small) >= 2
    for spec in specs:
        assert gemmtune.build(spec, arch=arch).compiled.source.staged, spec.short()
    check_picks(specs, arch, "wgmma", seed=3)
    check_picks(small, arch, "mma", seed=3)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32"])
def test_staged_configs_on_odd_shapes_every_layout(dtype):
    """Tiles, write-back paths and split tails, staged, where gemv would otherwise take M or N = 1."""
    arch = hopper_arch()
    configs = [WgmmaConfig(bm=128, bn=256, stages=4, persistent=True, split_tail=True),
               WgmmaConfig(bm=64, bn=128, consumers=1, stages=6, persistent=True, split_tail=True, serpentine=True),
               WgmmaConfig(bm=128, bn=128, stages=4, persistent=False, group_m=1)]
    jobs = []
    for layout in LAYOUTS:
        for shape in UNALIGNED + [(96, 96, 20003), (2, 3000, 999)]:
            spec = GemmSpec(*shape, layout=layout, dtype=dtype)
            for config in configs:
                staged = config.with_(stage_operands=True)
                if staging_choice(spec) != (False,) and not FAMILY.rejections(staged, spec, arch):
                    jobs.append((spec, staged, arch))
    assert len(jobs) >= 40
    assert not failed_jobs(jobs, lambda spec: spec.m + spec.n)


@pytest.mark.parametrize("dtype,layout", [("bf16", "nt"), ("fp16", "tn"), ("tf32", "nt"), ("bf16", "tt")])
def test_rows_off_a_sector_staged_and_in_place(dtype, layout):
    """Rows 16 bytes off a 32-byte boundary: either way, TMA store and direct stores."""
    arch = hopper_arch()
    size = 2 if dtype in ("bf16", "fp16") else 4
    inner = 1000 if size == 2 else 1004  # rows of 2000 or 4016 bytes: 16 bytes off a 32-byte boundary
    jobs = []
    for shape in [(1000, 1000, inner), (inner, 264, 4104), (264, inner, 520)]:
        spec = GemmSpec(*shape, layout=layout, dtype=dtype)
        if staging_choice(spec) != (False, True):
            continue
        for config in (WgmmaConfig(bm=128, bn=256, stages=4, persistent=True, split_tail=True, tma_store=True,
                                   store_slices=2 if size == 2 else 4),
                       WgmmaConfig(bm=128, bn=128, stages=6, persistent=True, split_tail=True)):
            for stage in (False, True):
                run = config.with_(stage_operands=stage)
                if not FAMILY.rejections(run, spec, arch):
                    jobs.append((spec, run, arch))
    assert len(jobs) >= 4
    assert not failed_jobs(jobs, lambda spec: spec.k)


@pytest.mark.parametrize("epilogue", ["relu+add", "alpha+beta", "bias_row+gelu", "bias_col+relu"])
def test_epilogues_with_staged_operands(epilogue):
    arch = hopper_arch()
    jobs = []
    for shape, layout, dtype in [((127, 129, 131), "nt", "bf16"), ((1000, 1001, 1003), "nn", "fp16"),
                                 ((300, 517, 77), "tt", "tf32"), ((521, 1031, 1001), "tn", "bf16")]:
        spec = GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue)
        from gemmtune.chooser import choose

        config = choose(spec, arch, family="wgmma").config
        assert config.stage_operands, spec.short()
        jobs.append((spec, config, arch))
    assert not failed_jobs(jobs, lambda spec: 5)


def test_a_staged_kernel_launched_again_reads_the_new_inputs():
    """The workspace is filled on every launch, from the operands bound then."""
    from gemmtune.compiler import compile_kernel
    from gemmtune.dtypes import to_storage
    from gemmtune.evaluate import check_output, upload_inputs
    from gemmtune.runtime import LoadedKernel, release, synchronize
    from gemmtune.verify import make_inputs, reference

    arch = hopper_arch()
    spec = GemmSpec(333, 444, 555, layout="nt", dtype="bf16")
    config = WgmmaConfig(bm=128, bn=128, stages=4, persistent=True, split_tail=True, stage_operands=True)
    kernel = LoadedKernel(compile_kernel(FAMILY.render(spec, config, arch), arch))
    buffers: dict = {}
    try:
        bindings = upload_inputs(spec, make_inputs(spec, np.random.default_rng(1)), buffers)
        for seed in (1, 2):
            inputs = make_inputs(spec, np.random.default_rng(seed))
            for name in ("A", "B"):  # the same device buffers, new values
                buffers[name].upload(to_storage(inputs[name], spec.storage_dtype(name)))
            buffers["D"].fill_nan(spec.out_dtype)
            kernel.launch(bindings)
            synchronize()
            assert check_output(buffers["D"], spec, reference(spec, inputs)).ok, seed
    finally:
        release([*(b.free for b in buffers.values()), kernel.unload], after_error=False)


def test_fp32_as_3xtf32_with_staged_rows():
    arch = hopper_arch()
    specs = [GemmSpec(1000, 1001, 1003, "nt", "fp32", math="3xtf32"), GemmSpec(300, 517, 77, "nn", "fp32", math="3xtf32"),
             GemmSpec(264, 999, 521, "tt", "fp32", "relu+add", math="3xtf32")]
    for spec in specs:
        assert staging_choice(spec) == (True,), spec.short()
    check_picks(specs, arch, "wgmma", seed=4)


@pytest.mark.parametrize("dtype,offset", [("bf16", 2), ("bf16", 6), ("tf32", 4), ("fp16", 14)])
def test_the_staging_kernel_reads_operands_that_start_anywhere(dtype, offset):
    """A and B bound `offset` bytes into larger buffers (a view into a bigger tensor): the staging
    kernel reads the caller's rows from any element boundary (its first and last 16 bytes byte by
    byte), and the cuMemcpy2DAsync path of sources written before the kernel existed agrees."""
    from dataclasses import replace

    from gemmtune.compiler import compile_kernel
    from gemmtune.dtypes import to_storage
    from gemmtune.evaluate import check_output
    from gemmtune.runtime import DeviceBuffer, LoadedKernel, release, synchronize
    from gemmtune.verify import make_inputs, reference

    arch = hopper_arch()
    spec = GemmSpec(257, 383, 1003, layout="nt", dtype=dtype)
    config = WgmmaConfig(bm=128, bn=128, stages=4, persistent=True, split_tail=True, stage_operands=True)
    source = FAMILY.render(spec, config, arch)
    assert source.stage_kernel and len(source.staged) == 2
    inputs = make_inputs(spec, np.random.default_rng(5))
    expected = reference(spec, inputs)
    buffers: dict = {}
    kernels = []
    try:
        bindings: dict = {}
        for name in ("A", "B"):
            data = to_storage(inputs[name], spec.storage_dtype(name)).tobytes()
            poisoned = np.frombuffer(b"\xff" * offset + data + b"\xff" * 64, dtype=np.uint8)
            buffers[name] = DeviceBuffer.from_numpy(poisoned.copy())
            bindings[name] = buffers[name].ptr + offset
        buffers["D"] = DeviceBuffer.alloc(spec.m * spec.n * spec.out_element_bytes)
        bindings["D"] = buffers["D"].ptr
        for variant in (source, replace(source, stage_kernel=False)):
            kernels.append(LoadedKernel(compile_kernel(variant, arch)))
            buffers["D"].fill_nan(spec.out_dtype)
            kernels[-1].launch(bindings)
            synchronize()
            assert check_output(buffers["D"], spec, expected).ok, (dtype, offset, variant.stage_kernel)
    finally:
        release([*(b.free for b in buffers.values()), *(k.unload for k in kernels)], after_error=False)
