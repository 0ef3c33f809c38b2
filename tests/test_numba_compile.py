"""The numba ladder without a GPU: every step compiles to PTX and a cubin, and runs right in numba's
CUDA simulator (small odd shapes, in a child process because the simulator is chosen at import)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gemmtune.numba_ladder  # noqa: E402,F401 - NumPy aliases numba-cuda needs, before numba loads

pytest.importorskip("numba.cuda")

from gemmtune.errors import ConfigError  # noqa: E402
from gemmtune.kernels.simt.config import ladder  # noqa: E402
from gemmtune.numba_ladder.compile import compile_numba, compile_ptx, ptxas_candidates  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402

STEPS = [name for name, _ in ladder("sm_90")]
SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.mark.parametrize("step", STEPS)
def test_every_step_compiles_to_ptx_for_sm90(step):
    ptx, entry, plan = compile_ptx(GemmSpec(1000, 1000, 1000), dict(ladder("sm_90"))[step], "sm_90")
    assert ".target sm_90" in ptx and f".entry {entry}(" in ptx
    assert ptx.count(".param .u64") == 3  # A, B, D as raw pointers: the CUDA-C launch ABI
    assert plan.block[0] * plan.block[1] == dict(ladder("sm_90"))[step].threads


def test_vectorized_step_emits_128_bit_loads_and_naive_does_not():
    vec, _, _ = compile_ptx(GemmSpec(1024, 1024, 1024), dict(ladder("sm_90"))["vectorized"], "sm_90")
    naive, _, _ = compile_ptx(GemmSpec(1024, 1024, 1024), dict(ladder("sm_90"))["naive"], "sm_90")
    assert "ld.global.v4.f32" in vec and "ld.shared.v4.f32" in vec
    assert "ld.global.v4.f32" not in naive
    # K = 1022 is not a multiple of 4: rows of A are not 16-byte aligned, so A falls back to scalar loads
    odd, _, _ = compile_ptx(GemmSpec(1024, 1024, 1022), dict(ladder("sm_90"))["vectorized"], "sm_90")
    assert odd.count("ld.global.v4.f32") < vec.count("ld.global.v4.f32")


@pytest.mark.skipif(not ptxas_candidates(), reason="needs ptxas (the nvidia-cuda-nvcc wheel of the test extra)")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cubin_keeps_the_register_tiles_in_registers(arch):
    for step, config in ladder(arch):
        compiled = compile_numba(GemmSpec(512, 512, 512), config, arch)
        assert compiled.cubin and compiled.source.family == "numba"
        assert compiled.resources.stack_bytes == 0 and not compiled.resources.spills, (step, compiled.resources)
        assert "def " in compiled.source.code  # the readable source is the Python factory


def test_rejects_what_it_does_not_implement():
    config = dict(ladder("sm_90"))["double_buffer"]
    with pytest.raises(ConfigError, match="epilogue"):
        compile_ptx(GemmSpec(64, 64, 64, epilogue="relu"), config, "sm_90")
    with pytest.raises(ConfigError, match="threads"):
        compile_ptx(GemmSpec(64, 64, 64), config.with_(bm=256, bn=256, wm=32, wn=32), "sm_90")


def _simulate(shape, layout, steps) -> dict:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=SRC)
    done = subprocess.run([sys.executable, "-m", "gemmtune.numba_ladder.simulate", "--shape", *map(str, shape),
                           "--layout", layout, "--steps", *steps], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_step_is_right_in_the_simulator_on_an_odd_shape():
    results = _simulate((7, 13, 5), "nn", STEPS)
    assert set(results) == set(STEPS)
    assert all(r["ok"] for r in results.values()), results


@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_vector_paths_with_edges_in_the_simulator(layout):
    # K = 40 and N = 36 are multiples of 4 (128-bit loads on), M = 20 and N = 36 leave partial tiles,
    # and K = 40 leaves a partial last k-slice of 16 (3 slices: the double buffer swaps twice).
    results = _simulate((20, 36, 40), layout, ["vectorized", "warptiling", "double_buffer"])
    assert all(r["ok"] for r in results.values()), results
