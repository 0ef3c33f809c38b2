"""mma's transpose_copy option without a GPU: where it is refused and why, that configs without it
render and key as before, the bank mapping of its scattered shared stores, NVRTC for sm_80/sm_90
without spills, and its SASS (ldmatrix for the transposed operand, no plain shared loads)."""
from __future__ import annotations

import hashlib

import pytest
from sass_dump import sass as sass_of

from gemmtune.compiler import compile_kernel
from gemmtune.errors import ConfigError
from gemmtune.kernels import get_family
from gemmtune.kernels.mma.config import MmaConfig
from gemmtune.kernels.mma.render import _rotation_step, operands
from gemmtune.spec import GemmSpec

FAMILY = get_family("mma")
LAYOUTS = ("nn", "tn", "tt")  # those with an MN-major operand
SHAPES = ((4096, 4096, 4096), (127, 129, 131), (1000, 1000, 1000))


def _transposed(spec: GemmSpec, arch: str, **changes) -> MmaConfig:
    return FAMILY.default_config(spec, arch).with_(transpose_copy=True, **changes)


def test_refused_where_it_does_not_apply():
    flag = MmaConfig(transpose_copy=True)
    for spec, words in ((GemmSpec(512, 512, 512, "nn", "bf16"), "ldmatrix.trans"),
                        (GemmSpec(512, 512, 512, "tn", "fp16"), "ldmatrix.trans"),
                        (GemmSpec(512, 512, 512, "nt", "tf32"), "no MN-major operand"),
                        (GemmSpec(512, 512, 512, "nn", "fp32", math="3xtf32"), "3xtf32")):
        reasons = FAMILY.rejections(flag, spec, "sm_80")
        assert list(reasons) == ["transpose_copy"] or "transpose_copy" in reasons, reasons
        assert words in reasons["transpose_copy"]
        with pytest.raises(ConfigError, match="transpose_copy"):
            FAMILY.render(spec, flag, "sm_80")
    for layout in LAYOUTS:
        assert not FAMILY.rejections(flag, GemmSpec(512, 512, 512, layout, "tf32"), "sm_80")


def test_json_and_keys_unchanged_without_it():
    config = MmaConfig()
    assert "transpose_copy" not in config.to_json()  # database keys from before the option stay
    assert config.key() == MmaConfig.from_json(config.to_json()).key()
    on = config.with_(transpose_copy=True)
    assert on.to_json()["transpose_copy"] is True and FAMILY.config_from_json(on.to_json()) == on
    assert on.key() != config.key() and "transpose" in on.describe() and "transpose" not in config.describe()
    space = FAMILY.space()  # the space pins it off: grid codes of old configs do not move
    assert space.code_of(config) is not None and space.code_of(on) is None


# sha256 (first 16 hex digits) of sources rendered without the option: the option must not change them.
# Digests of 2026-11-29 (the write-back's loops with columns innermost; before that 2026-11-26's strided
# 16-byte copies, staged write-back, the 256x128 tuned step, and commit 724a3cc). Rendering changed on purpose? Update these.
BEFORE = [("sm_80", (4096, 4096, 4096, "nn", "tf32"), "default", "ec7bf465be62995d"),
          ("sm_90", (127, 129, 131, "tn", "tf32"), "default", "09b2ad6a87fac18a"),
          ("sm_80", (1000, 1000, 1000, "tt", "tf32"), "tuned", "ef3d5bf826ee0767"),
          ("sm_90", (4093, 4091, 4097, "nt", "bf16"), "default", "699e0033bf26f755"),
          ("sm_75", (127, 129, 131, "nn", "fp16"), "smem_mma", "b01216f4fbe29f00"),
          ("sm_86", (4096, 4096, 4096, "tn", "tf32"), "smem_mma", "8737a85ca0b1c540")]


@pytest.mark.parametrize("arch,shape,name,digest", BEFORE)
def test_configs_without_it_render_as_before(arch, shape, name, digest):
    spec = GemmSpec(*shape)
    config = FAMILY.default_config(spec, arch) if name == "default" else dict(FAMILY.ladder(arch))[name]
    code = FAMILY.render(spec, config, arch).code
    assert hashlib.sha256(code.encode()).hexdigest()[:16] == digest
    assert not any(op.transposed for op in operands(spec, config, arch))


def test_transposed_operands_are_k_major_in_shared_memory():
    spec = GemmSpec(4096, 4096, 4096, "tn", "tf32")
    a, b = operands(spec, _transposed(spec, "sm_80"), "sm_80")
    for op in (a, b):
        assert op.transposed and op.k_major and op.use_ldmatrix and not op.use_async
    a, b = operands(GemmSpec(4096, 4096, 4096, "nn", "tf32"), _transposed(spec, "sm_80"), "sm_80")
    assert not a.transposed and a.use_async and b.transposed


def _bank(row: int, col: int, bk: int) -> int:
    """The bank of word (row, col) of a K-major tf32 tile swizzled as render._swizzle_term does."""
    row_bytes, byte = bk * 4, col * 4
    term = row & 7 if row_bytes >= 128 else (row >> 1) & 3 if row_bytes == 64 else (row >> 2) & 1
    return (row * row_bytes + ((((byte >> 4) ^ term) << 4) | (byte & 15))) // 4 % 32


@pytest.mark.parametrize("k_bytes", [32, 64, 128])
@pytest.mark.parametrize("copy_bytes", [4, 8, 16])
def test_scattered_stores_hit_32_distinct_banks(k_bytes, copy_bytes):
    """Every store instruction of a warp (the mapping of _transposed_unit_loop / _transposed_store:
    k = idx % BK, unit c = idx / BK, store s writes row E*c + (s + rot) % E) touches 32 banks."""
    bk, per = k_bytes // 4, copy_bytes // 4
    n = {16: 4096, 8: 4094, 4: 4095}[copy_bytes]  # B is stored K×N: its rows are N long
    spec = GemmSpec(4096, n, 4096, "nn", "tf32")
    b = operands(spec, MmaConfig(k_bytes=k_bytes, transpose_copy=True), "sm_80")[1]
    assert (b.copy_bytes, b.bk) == (copy_bytes, bk)
    for warp in range(8):
        for s in range(per):
            banks = set()
            for lane in range(32):
                idx = warp * 32 + lane
                k, c = idx % bk, idx // bk
                rot = (c // _rotation_step(b)) % per
                banks.add(_bank(c * per + (s + rot) % per, k, bk))
            assert len(banks) == 32, (warp, s, sorted(banks))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_compiles_without_spills(arch, layout):
    for shape in SHAPES:
        spec = GemmSpec(*shape, layout, "tf32")
        for config in (_transposed(spec, arch), _transposed(spec, arch, k_bytes=32, stages=5)):
            assert not FAMILY.rejections(config, spec, arch)
            compiled = compile_kernel(FAMILY.render(spec, config, arch), arch)
            assert compiled.resources.spills == 0, (spec.short(), config.describe(), compiled.resources.summary())
            assert compiled.resources.stack_bytes == 0, (spec.short(), config.describe())


def test_sass_reads_the_transposed_operand_by_ldmatrix(tmp_path):
    spec = GemmSpec(4096, 4096, 4096, "nn", "tf32")

    def sass(config) -> list[str]:
        text = sass_of(tmp_path, compile_kernel(FAMILY.render(spec, config, "sm_90"), "sm_90").cubin)
        return [line for line in text.splitlines() if "@!PT" not in line]  # ptxas' never-run fillers

    def count(lines: list[str], op: str) -> int:
        return sum(f" {op} " in line or f" {op}." in line for line in lines)

    plain, moved = sass(FAMILY.default_config(spec, "sm_90")), sass(_transposed(spec, "sm_90"))
    assert count(plain, "LDS") > 0 and count(moved, "LDS") == 0  # B's fragments no longer by 32-bit loads
    assert count(moved, "LDSM") == 3 * count(plain, "LDSM")  # A's as before, B's by ldmatrix (both sets)
    assert count(moved, "STS") > 0 and count(moved, "LDG") > 0
    assert count(moved, "HMMA") == count(plain, "HMMA")
    assert not any(" LDL" in line or " STL" in line for line in moved)
