"""The gemv family's tuning space holds no twins: every valid config of a spec renders a different kernel
(the structural rules unused_threads_x and unused_groups keep one value of the fields a kernel does not read),
so a tuner never measures one kernel twice under two names; and the chooser's candidates stay in the space."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from gemmtune.chooser.candidates import candidates
from gemmtune.kernels.gemv.render import render
from gemmtune.spec import GemmSpec
from gemmtune.tune.space import space_for, valid_codes, verdict

SPECS = [GemmSpec(16, 4096, 4096, "nn", "fp32"), GemmSpec(16, 4096, 4096, "nt", "bf16"),
         GemmSpec(1, 4096, 4096, "nt", "bf16"), GemmSpec(1, 1024, 4096, "nn", "fp32"),
         GemmSpec(8, 1000, 4100, "nn", "tf32")]


def _kernel_key(spec: GemmSpec, config) -> str:
    """What the GPU runs: the code without its config comment, the grid, block and shared memory."""
    source = render(spec, config, "sm_90a")
    body = "\n".join(line for line in source.code.splitlines() if not line.startswith("// config:"))
    return hashlib.sha1(f"{body}{source.grid}{source.block}{source.dynamic_smem}".encode()).hexdigest()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_every_valid_config_is_a_different_kernel(spec):
    space = space_for("gemv")
    configs = [space.config_at(np.unravel_index(int(code), space.shape)) for code in valid_codes(space, spec, "sm_90a")]
    kernels: dict[str, list[str]] = {}
    for config in configs:
        kernels.setdefault(_kernel_key(spec, config), []).append(config.describe())
    twins = [names for names in kernels.values() if len(names) > 1]
    assert len(configs) >= 100 and not twins, twins[:2]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_the_choosers_candidates_are_in_the_space(spec):
    space = space_for("gemv")
    for config in candidates("gemv", spec, "sm_90a", 132):
        assert verdict(space, config, spec, "sm_90a") is None, config.describe()
