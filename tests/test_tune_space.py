"""The search space: its size, the rules and their reasons, and the broadcast tables' correctness."""
from __future__ import annotations

import time

import numpy as np
import pytest

from gemmtune.kernels.simt import config as simt_config
from gemmtune.kernels.simt.config import SimtConfig
from gemmtune.spec import GemmSpec
from gemmtune.tune import space as space_module
from gemmtune.kernels.simt.space import SIMT_DOMAINS, SIMT_READS
from gemmtune.tune.space import analyze, candidate_set, first_failing, space_for, verdict

SPEC = GemmSpec(4096, 4096, 4096)


@pytest.fixture(scope="module")
def simt():
    return space_for("simt")


def test_domains_and_size(simt) -> None:
    domains = {p.name: p.domain for p in simt.params}
    assert domains["bm"] == domains["bn"] == (32, 64, 128, 256)
    assert domains["kind"] == ("tiled",) and domains["vec"] == (1, 4) and domains["pad"] == (0, 4)
    assert simt.size == 4 * 4 * 3 * 5 * 5 * 5 * 5 * 4 * 2 * 2 * 2 * 2 * 2
    assert domains["stage_c"] == (False, True)
    # Fields the space does not tune are pinned to the config's defaults.
    assert all(len(domains[f]) == 1 for f in domains if f not in dict(SIMT_DOMAINS))


def test_stage_c_is_searched_only_when_the_epilogue_reads_c(simt) -> None:
    from gemmtune.tune.space import candidate_set

    plain = candidate_set(simt, GemmSpec(2048, 2048, 2048), "sm_90")
    fused = candidate_set(simt, GemmSpec(2048, 2048, 2048, epilogue="relu+add"), "sm_90")
    assert not any(c.stage_c for c in plain.configs(range(0, len(plain), 97)))
    assert len(plain) < len(fused) < 2 * len(plain)  # some staged tiles do not fit in shared memory
    assert any(c.stage_c for c in fused.configs(range(len(fused))))


def test_every_constraint_declares_its_footprint(simt) -> None:
    assert set(simt_config.CONSTRAINTS) <= set(SIMT_READS)
    assert [r.name for r in simt.rules if not r.structural] == list(simt_config.CONSTRAINTS)


def test_counts_add_up_and_enumeration_is_fast(simt) -> None:
    space_module._analyze.cache_clear()
    started = time.perf_counter()
    report = analyze(simt, SPEC, "sm_90")
    assert time.perf_counter() - started < 10.0  # the naive loop over 1.9M configs takes ~10 s alone
    assert sum(c.first for c in report.counts) + report.valid == report.total == simt.size
    assert 50_000 < report.valid < 200_000
    for count in report.counts:
        assert count.any >= count.first or count.structural
        assert (count.first > 0) == bool(count.example) or count.any > 0


def test_tables_agree_with_direct_evaluation(simt) -> None:
    """Footprints are declared by hand: check them against the predicates on random configs."""
    rng = np.random.default_rng(0)
    shape = simt.shape
    valid = candidate_set(simt, SPEC, "sm_90")
    for code in rng.integers(simt.size, size=4000):
        config = simt.config_at(np.unravel_index(int(code), shape))
        direct = verdict(simt, config, SPEC, "sm_90")
        assert first_failing(simt, config, SPEC, "sm_90") == direct, config
        assert (valid.position_of(config) is not None) == (direct is None)


def test_candidates_pass_the_family_constraints(simt) -> None:
    candidates = candidate_set(simt, SPEC, "sm_90")
    for position in np.random.default_rng(1).choice(len(candidates), 500, replace=False):
        config = candidates.config(int(position))
        assert simt_config.rejections(config, SPEC, "sm_90") == {}
        assert candidates.position_of(config) == position


@pytest.mark.parametrize("changes, rule, words", [
    (dict(wm=16, wn=0), "warp_pair", "both 0"),
    (dict(wm=0, wn=0, wniter=2, tm=8, tn=8), "unused_wniter", "no effect"),
    (dict(stages=1, async_copy=True), "pipeline", "cp.async needs stages=2"),
    (dict(bm=256, bn=256, bk=32, stages=2), "shared_memory", "static limit"),
    (dict(vec=4, tm=2), "vector", "divisible by 4"),
])
def test_rules_name_their_reason(simt, changes: dict, rule: str, words: str) -> None:
    config = SimtConfig().with_(**changes)
    assert verdict(simt, config, SPEC, "sm_90") == rule
    reason = next(r.check(config, SPEC, "sm_90") for r in simt.rules if r.name == rule)
    assert words in reason


def test_arch_changes_the_space(simt) -> None:
    # cp.async needs sm_80: an older target loses every async_copy config.
    old = analyze(simt, SPEC, "sm_75")
    new = analyze(simt, SPEC, "sm_90")
    assert old.valid < new.valid
    assert candidate_set(simt, SPEC, "sm_90").position_of(SimtConfig()) is not None
    assert candidate_set(simt, SPEC, "sm_75").position_of(SimtConfig()) is None  # async_copy=True by default


def test_subset_and_membership(simt) -> None:
    candidates = candidate_set(simt, GemmSpec(256, 256, 256), "sm_90")
    picked = candidates.configs([3, 10, 99])
    outsider = SimtConfig(bm=48)  # outside the domains
    subset = candidates.subset(picked + [outsider])
    assert len(subset) == 3 and subset.configs(range(3)) == sorted(picked, key=simt.code_of)
    assert subset.position_of(outsider) is None


def test_unknown_family_is_a_config_error() -> None:
    from gemmtune.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown family"):
        space_for("wgmma_sm90")
