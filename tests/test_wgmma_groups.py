"""The wgmma config's three groups and its C path (kernels/wgmma/groups.py), and the ring part: the
flat config round-trips through the groups, every valid combination of the C flags is one CPath, and
the generated kernels step their ring in one way only."""
from __future__ import annotations

import json
import re

import pytest

from gemmtune.kernels import get_family
from gemmtune.kernels.parts.ring import RING
from gemmtune.kernels.wgmma.config import WgmmaConfig
from gemmtune.kernels.wgmma.groups import CPath
from gemmtune.spec import GemmSpec
from gemmtune.tune.space import candidate_set, space_for

FAMILY = get_family("wgmma")
FUSED = GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add")
PLAIN = GemmSpec(4096, 4096, 4096, "nt", "bf16")


def _configs(spec: GemmSpec, every: int = 1) -> list[WgmmaConfig]:
    candidates = candidate_set(space_for("wgmma"), spec, "sm_90a")
    return candidates.configs(range(0, len(candidates), every))


@pytest.mark.parametrize("spec", [FUSED, PLAIN], ids=["fused", "plain"])
def test_groups_round_trip_the_flat_config(spec):
    for config in _configs(spec):
        again = WgmmaConfig.from_groups(config.mainloop, config.schedule, config.epilogue)
        assert again == config and again.to_json() == config.to_json()


def test_every_c_path_of_the_space_is_one_enum_value():
    seen = {config.c_path(FUSED) for config in _configs(FUSED)}
    assert seen == {CPath.TILE, CPath.RING, CPath.D_OVER_C, CPath.D_OVER_C_FIRST_BUFFER, CPath.GLOBAL}
    assert {config.c_path(PLAIN) for config in _configs(PLAIN)} == {CPath.NONE}
    for config in _configs(FUSED):
        path = config.c_path(FUSED)
        assert path.through_ring == config.c_ring and path.d_over_c == config.d_over_c
        assert path.first_in_buffer == config.c_first_buffer and (path is CPath.GLOBAL) == (not config.tma_store)


def test_an_old_flat_record_loads_and_names_its_path():
    """A record written before d_over_c, c_first_buffer and the groups existed (no such keys)."""
    old = {"bm": 128, "bn": 256, "stages": 4, "consumers": 2, "specialized": True, "persistent": True,
           "group_m": 8, "cluster_m": 2, "tma_store": True, "store_slices": 2, "pingpong": False,
           "c_spread": False, "split_tail": False, "c_ring": True, "c_l2_prefetch": False, "stmatrix": True}
    config = FAMILY.config_from_json(json.loads(json.dumps(old)))
    assert config.c_path(FUSED) is CPath.RING and config.epilogue.c_path is CPath.RING
    assert config.to_json() == old


def test_a_group_with_an_impossible_c_path_is_refused():
    config = _configs(FUSED)[0]
    bad = config.epilogue.__class__(**{**config.epilogue.__dict__, "tma_store": False, "c_path": CPath.RING})
    with pytest.raises(ValueError, match="tma_store"):
        WgmmaConfig.from_groups(config.mainloop, config.schedule, bad)


def test_kernels_step_their_ring_through_the_ring_part():
    """The ring part's Ring is emitted once, and nothing else in a wgmma kernel wraps the ring."""
    for spec in (FUSED, PLAIN):
        for config in _configs(spec, every=97):
            code = FAMILY.render(spec, config, "sm_90a").code
            assert code.count(RING) == 1 and "ring.advance();" in code, config.describe()
            assert len(re.findall(r"== STAGES\)", code)) == 1 and "phase ^= 1" not in code.replace(RING, "")


def test_kernels_carry_only_what_their_c_path_and_schedule_use():
    """No C barriers, C constants or piece counter without C; C's barriers only where the C path waits
    on them; ping-pong's turn barriers only with ping-pong."""
    for spec in (FUSED, PLAIN):
        for config in _configs(spec, every=41):
            code = FAMILY.render(spec, config, "sm_90a").code
            path = config.c_path(spec)
            waits_on_c = path in (CPath.TILE, CPath.D_OVER_C_FIRST_BUFFER)
            assert ("c_full" in code) == waits_on_c and ("c_empty" in code) == waits_on_c, config.describe()
            assert ("mbarrier_init(&c_full[turn]" in code) == waits_on_c, config.describe()
            assert ("int epi = 0;" in code) == waits_on_c, config.describe()
            assert ("C_BOX_ROWS =" in code) == (path not in (CPath.NONE, CPath.GLOBAL)), config.describe()
            assert ("C_SLOT_BYTES =" in code) == path.through_ring, config.describe()
            assert ("C_RELEASE_KB =" in code) == (path is CPath.TILE), config.describe()
            assert ("mainloop_done" in code) == config.pingpong, config.describe()


def test_shared_memory_is_one_struct_with_only_the_members_used():
    """SharedStorage holds the ring, the store buffer where there is one, and the barriers the kernel
    waits on; its size and barrier offsets are checked against the allocation at compile time."""
    for spec in (FUSED, PLAIN):
        for config in _configs(spec, every=53):
            code = FAMILY.render(spec, config, "sm_90a").code
            storage = code[code.index("struct SharedStorage {"):code.index("};", code.index("struct SharedStorage {"))]
            assert ("unsigned char out[EPI_BYTES];" in storage) == (config.epilogue_bytes(spec) > 0)
            assert ("u64 c_full[TILE_TURNS];" in storage) == (config.c_path(spec) in (CPath.TILE, CPath.D_OVER_C_FIRST_BUFFER))
            assert ("u64 mainloop_done[TILE_TURNS];" in storage) == config.pingpong
            assert f"constexpr int SMEM_BYTES = {config.smem_bytes(spec)};" in code
            assert "static_assert(sizeof(SharedStorage) + 1024 - 16 <= SMEM_BYTES" in code
            assert "smem + STAGES" not in code  # no pointer arithmetic over the raw bytes
            # NVRTC 13.0 (the GPU machines' CUDA) rejects __builtin_offsetof in static_assert: every
            # wgmma kernel failed to compile there while 13.5 accepted it (2026-11-25)
            assert "offsetof" not in code
