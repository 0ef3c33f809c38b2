"""On the GPU: compute-sanitizer's memcheck, racecheck, synccheck and initcheck over exported kernels
of every family × every epilogue op, on shapes whose M and N are multiples of no tile size.

Each case is exported (kernel + harness), built with nvcc and run under the sanitizer by the harness
(inputs filled, D poisoned, kernel checked against the reference). Operand buffers are allocated at
their exact sizes, so a read past bias, C or D is an out-of-bounds access that memcheck reports
even where the value lands in a discarded row. memcheck runs over several configs per family (each
write-back path of the wgmma family); the three other tools over the config export picks.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from gemmtune.spec import GemmSpec

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

# Every epilogue op appears at least once: alpha, beta, bias_row, bias_col, relu, gelu, add.
EPILOGUES = ("none", "alpha+beta", "bias_row", "bias_col+relu", "alpha+bias_row+gelu", "relu+add",
             "bias_col+gelu+add")
# (family, dtype, layout, M, N, K): M and N are multiples of no tile size (nor of 16); the wgmma
# shapes keep the 16-byte row strides TMA needs.
SHAPES = (("simt", "fp32", "nn", 197, 301, 77), ("gemv", "bf16", "nt", 7, 301, 77),
          ("gemv", "fp32", "nn", 301, 1, 77), ("wgmma", "bf16", "nt", 264, 392, 136),
          ("wgmma", "tf32", "nt", 264, 392, 136), ("mma", "bf16", "nn", 197, 301, 77),
          ("mma", "tf32", "tn", 197, 301, 77), ("mma", "fp16", "tt", 264, 392, 136),
          ("wgmma", "tf32", "nn", 264, 392, 136), ("wgmma", "3xtf32", "tn", 264, 392, 136),
          ("gemv", "fp32", "nn", 1, 301, 1077), ("gemv", "fp32", "nn", 9, 1700, 1076))
# (dtype "3xtf32": fp32 data multiplied as 3xtf32; wgmma nn/tn transpose MN-major tiles in shared memory;
# one vector of few outputs stored K×N: on sm_90 the K split over a cluster of 16, sums in DSMEM; 9 vectors
# stored M×K against W stored K×N: on sm_90 the columns kernel fed by TMA, its last strip and stage past N and K)
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
# Ladder steps run beyond the config export picks: wgmma's direct store, sliced TMA stores and
# ping-pong consumers; every mma step (plain loads, ldmatrix, cp.async ring, swizzle, wide tiles).
EXTRA_STEPS = {"wgmma": ("tma_wgmma", "sliced_store", "pingpong"),
               "mma": ("smem_mma", "ldmatrix", "multistage", "swizzle", "warp_tiles")}


@dataclass(frozen=True)
class Case:
    family: str
    config_name: str
    spec: GemmSpec
    config: Any  # the family's Config, or None for export's own choice

    @property
    def name(self) -> str:
        dtype = "3xtf32" if self.spec.math == "3xtf32" else self.spec.dtype
        shape = f"{self.spec.m}x{self.spec.n}x{self.spec.k}"  # (one family, dtype and layout may have several shapes)
        return f"{self.family}-{dtype}-{self.spec.layout}-{shape}-{self.config_name}-{self.spec.epilogue}"


def _known_wgmma_configs(family, spec: GemmSpec) -> list[tuple[str, Any]]:
    """The shipped wgmma configs (stmatrix, overlapped epilogue, C ring, D over C ...) laid on `spec`."""
    table = json.loads(resources.files("gemmtune").joinpath("data/known_configs.json").read_text())
    found = {}
    for entry in table["entries"]:
        if entry["family"] == "wgmma" and entry["gpu"] == "H100" and entry["m"] == 4096:
            label = "known_fused" if entry.get("epilogue") else "known"
            found.setdefault((label, entry.get("dtype")), family.config_from_json(entry["config"]))
    return [(label, config) for (label, dtype), config in found.items() if dtype in (None, spec.dtype)]


def _cases(arch: str) -> list[Case]:
    from gemmtune.kernels import get_family

    cases = []
    for family_name, dtype, layout, m, n, k in SHAPES:
        family = get_family(family_name)
        for epilogue in EPILOGUES:
            math = "3xtf32" if dtype == "3xtf32" else "auto"
            spec = GemmSpec(m, n, k, layout=layout, dtype="fp32" if math == "3xtf32" else dtype,
                            epilogue=epilogue, math=math)
            cases.append(Case(family_name, "chosen", spec, None))
            extra = [(n_, c) for n_, c in family.ladder(arch) if n_ in EXTRA_STEPS.get(family_name, ())]
            extra += _known_wgmma_configs(family, spec) if family_name == "wgmma" else []
            cases += [Case(family_name, label, spec, config) for label, config in extra
                      if not family.rejections(config, spec, arch)]
    return cases


def _sanitizer() -> str:
    found = shutil.which("compute-sanitizer") or next(
        (str(p) for p in (Path("/usr/local/cuda/bin/compute-sanitizer"),) if p.exists()), None)
    if found is None:
        pytest.skip("compute-sanitizer is not installed")
    return found


def _build(case: Case, root: Path, arch: str, device: Any, nvcc: Any) -> Path:
    from gemmtune.export import export_spec
    from gemmtune.export.toolchain import build_harness

    folder = export_spec(case.spec, root / case.name, arch=arch, config=case.config, device=device,
                         family=case.family).path
    return build_harness(folder, nvcc)


def _sanitize(sanitizer: str, tool: str, executable: Path) -> tuple[int, str]:
    # --error-exitcode makes a reported hazard fail the run even when the harness's own check passes.
    done = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "97", "--print-limit", "5",
                           str(executable), "1"], capture_output=True, text=True, timeout=900)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[Case, Path]:
    """Every case exported and its harness built (in parallel): {case: executable}."""
    from gemmtune.compiler import ARCHES
    from gemmtune.device import query_device
    from gemmtune.export.toolchain import find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("no nvcc (pip install the test extra)")
    device = query_device()
    arch = device.arch if device.arch in ARCHES else "sm_90"
    cases = _cases(arch)
    root = tmp_path_factory.mktemp("sanitize")
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        return dict(zip(cases, pool.map(lambda c: _build(c, root, arch, device, nvcc), cases)))


def _run_tool(built: dict[Case, Path], tool: str) -> dict[str, tuple[int, str]]:
    """{case name: (exit code, output)} of `tool` over its cases, several at a time."""
    sanitizer = _sanitizer()
    cases = [c for c in built if tool == "memcheck" or c.config_name == "chosen"]
    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip([c.name for c in cases], pool.map(lambda c: _sanitize(sanitizer, tool, built[c]), cases)))


def _errors(output: str) -> int:
    """Errors the sanitizer reported: memcheck/synccheck/initcheck print "ERROR SUMMARY: n errors",
    racecheck "RACECHECK SUMMARY: h hazards displayed (n errors, w warnings)"; -1 if neither."""
    counts = [int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error|\((\d+) errors?,", output) for n in n if n]
    return max(counts) if counts else -1


def test_every_family_and_epilogue_op_is_covered():
    names = {case.name for case in _cases("sm_90")}
    assert len(names) == len(_cases("sm_90"))  # one export folder and one result per case
    for family, dtype, layout, m, n, k in SHAPES:
        for epilogue in EPILOGUES:
            assert f"{family}-{dtype}-{layout}-{m}x{n}x{k}-chosen-{epilogue}" in names
    assert any(name.startswith("wgmma-bf16-nt-264x392x136-known_fused") for name in names)  # the C ring / D-over-C path


@pytest.mark.parametrize("tool", TOOLS)
def test_no_sanitizer_reports_on_edge_tiles(built, tool):
    runs = _run_tool(built, tool)
    failed = {name: (code, _errors(out), out.strip().splitlines()[:8])
              for name, (code, out) in runs.items() if code != 0 or _errors(out) != 0}
    assert not failed, f"{tool}: {len(failed)} of {len(runs)} case(s) failed: " + "\n".join(
        f"{name}: exit {code}, {errors} errors: " + " | ".join(lines) for name, (code, errors, lines) in failed.items())
