"""gemmtune profile without a GPU: which kernel a target names."""
from __future__ import annotations

import json

from gemmtune.profile import Target, compiled_for
from gemmtune.spec import GemmSpec


def test_profile_builds_a_registry_family_from_its_json_config_or_ladder_step():
    """--config for wgmma is a WgmmaConfig (not a simt config) or one of wgmma's ladder steps."""
    spec = GemmSpec(512, 512, 512, "nt", "fp16", "relu+add")
    fused = compiled_for(Target(spec, "wgmma", json.dumps({"bm": 128, "bn": 256, "stages": 3, "tma_store": True}),
                                "sm_90a"))
    assert fused.source.family == "wgmma" and fused.source.config["stages"] == 3
    step = compiled_for(Target(spec.without_epilogue(), "wgmma", "sliced_store", "sm_90a"))
    assert step.source.config["store_slices"] == 4


def test_profile_defaults_to_the_best_known_config_of_the_chosen_family():
    """Without --config the kernel is the one build and bench choose (the shipped table here)."""
    from gemmtune.build import choose_config

    spec = GemmSpec(8192, 8192, 8192, "nt", "bf16")
    profiled = compiled_for(Target(spec, "wgmma", None, "sm_90a"))
    assert profiled.source.config == choose_config(spec, "sm_90a", family="wgmma").config.to_json()
