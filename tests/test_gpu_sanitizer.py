"""On the GPU: compute-sanitizer's memcheck, racecheck, synccheck and initcheck over exported kernels
of every family × every epilogue op and every gemv kernel variant, on shapes whose M and N are
multiples of no tile size.

Each case is exported (kernel + harness), built with nvcc and run under the sanitizer by the harness
(inputs filled, D poisoned, kernel checked against the reference). Operand buffers are allocated at
their exact sizes, so a read past bias, C or D is an out-of-bounds access that memcheck reports
even where the value lands in a discarded row. memcheck runs over several configs per family (each
write-back path of the wgmma family); the three other tools over the config export picks, and synccheck
also over the wgmma cluster configs (their cluster barriers). Only the cases a selected tool runs are
built: `-k synccheck` builds and checks the chosen exports of every family and gemv variant plus the
wgmma cluster configs (about 110 cases).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from gemmtune.spec import GemmSpec
from gemv_variants import VARIANT_SHAPES, VARIANTS, chosen_config, spec_of, variant

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
          ("gemv", "fp32", "nn", 1, 301, 1077), ("gemv", "fp32", "nn", 9, 1700, 1076),
          ("wgmma", "bf16", "nt", 37, 392, 4104))
# (dtype "3xtf32": fp32 data multiplied as 3xtf32; wgmma nn/tn transpose MN-major tiles in shared memory;
# one vector of few outputs stored K×N: the columns kernel (the K split over a cluster is no pick); 9 vectors
# stored M×K against W stored K×N: on sm_90 the columns kernel fed by TMA, its last strip and stage past N and K;
# 37 rows: the swap-AB kernel (D written transposed), its 7 tiles split along K)
# Every other gemv variant (gemv_variants.py) on a shape where export picks it, under two epilogues that
# together use every op; and the export whose K split synccheck reported in issue 66 (now unsplit).
VARIANT_EPILOGUES = ("alpha+beta+bias_row+gelu", "bias_col+relu+add")
ISSUE_66 = ("gemv", "fp32", "nn", 1, 1023, 4099, "relu")
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
SANITIZER_WORKERS = min(16, os.cpu_count() or 8)  # harnesses under a tool at once (one GPU, mostly host work)
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


def _shape_cases(arch: str) -> list[Case]:
    """SHAPES × EPILOGUES: the chosen config, and the extra configs of the wgmma and mma families."""
    from gemmtune.kernels import get_family

    cases = []
    for family_name, dtype, layout, m, n, k in SHAPES:
        family = get_family(family_name)
        for epilogue in EPILOGUES:
            spec = spec_of(dtype, layout, m, n, k, epilogue)
            cases.append(Case(family_name, "chosen", spec, None))
            extra = [(n_, c) for n_, c in family.ladder(arch) if n_ in EXTRA_STEPS.get(family_name, ())]
            extra += _known_wgmma_configs(family, spec) if family_name == "wgmma" else []
            cases += [Case(family_name, label, spec, config) for label, config in extra
                      if not family.rejections(config, spec, arch)]
    return cases


def _variant_cases() -> list[Case]:
    """The chosen config of each gemv variant's shape not among SHAPES, and issue 66's export."""
    in_shapes = {tuple(shape) for family, *shape in SHAPES if family == "gemv"}
    rows = [(dtype, layout, m, n, k, epilogue) for _, dtype, layout, m, n, k in VARIANT_SHAPES
            if (dtype, layout, m, n, k) not in in_shapes for epilogue in VARIANT_EPILOGUES]
    return [Case("gemv", "chosen", spec_of(*row), None) for row in [*rows, ISSUE_66[1:]]]


def _cases(arch: str) -> list[Case]:
    return _shape_cases(arch) + _variant_cases()


def _runs_under(case: Case, tool: str) -> bool:
    """memcheck runs every case; synccheck the chosen configs and the cluster ones; the others the chosen."""
    if tool == "memcheck" or case.config_name == "chosen":
        return True
    return tool == "synccheck" and getattr(case.config, "cluster_m", 1) > 1


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


@dataclass
class Harnesses:
    """Exported cases with their harnesses built by nvcc, each case once (in parallel)."""

    root: Path
    arch: str
    device: Any
    nvcc: Any
    built: dict[Case, Path] = field(default_factory=dict)

    def build(self, cases: list[Case]) -> dict[Case, Path]:
        """{case: executable} for `cases`, building those not built yet."""
        todo = [c for c in cases if c not in self.built]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
            made = pool.map(lambda c: _build(c, self.root, self.arch, self.device, self.nvcc), todo)
            self.built.update(zip(todo, made))
        return {c: self.built[c] for c in cases}


@pytest.fixture(scope="module")
def harnesses(tmp_path_factory) -> Harnesses:
    from gemmtune.compiler import ARCHES
    from gemmtune.device import query_device
    from gemmtune.export.toolchain import find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("no nvcc (pip install the test extra)")
    device = query_device()
    arch = device.arch if device.arch in ARCHES else "sm_90"
    return Harnesses(tmp_path_factory.mktemp("sanitize"), arch, device, nvcc)


def _run_tool(harnesses: Harnesses, tool: str) -> dict[str, tuple[int, str]]:
    """{case name: (exit code, output)} of `tool` over its cases (only those built), several at a time."""
    sanitizer = _sanitizer()
    executables = harnesses.build([c for c in _cases(harnesses.arch) if _runs_under(c, tool)])
    with ThreadPoolExecutor(max_workers=SANITIZER_WORKERS) as pool:
        runs = pool.map(lambda c: _sanitize(sanitizer, tool, executables[c]), executables)
        return dict(zip([c.name for c in executables], runs))


def _errors(output: str) -> int:
    """Errors the sanitizer reported: memcheck/synccheck/initcheck print "ERROR SUMMARY: n errors",
    racecheck "RACECHECK SUMMARY: h hazards displayed (n errors, w warnings)"; -1 if neither."""
    counts = [int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error|\((\d+) errors?,", output) for n in n if n]
    return max(counts) if counts else -1


def _chosen_variants() -> dict[Case, str]:
    """Each gemv case's variant as export's own choice on sm_90 makes it (as on the GPU: tuning database,
    known configs, chooser)."""
    return {case: variant(case.spec, chosen_config(case.spec, "sm_90")) for case in _cases("sm_90")
            if case.family == "gemv" and case.config_name == "chosen"}


def test_every_family_and_epilogue_op_is_covered():
    cases = _cases("sm_90")
    names = {case.name for case in cases}
    assert len(names) == len(cases)  # one export folder and one result per case
    for family, dtype, layout, m, n, k in SHAPES:
        for epilogue in EPILOGUES:
            assert f"{family}-{dtype}-{layout}-{m}x{n}x{k}-chosen-{epilogue}" in names
    assert any(name.startswith("wgmma-bf16-nt-264x392x136-known_fused") for name in names)  # the C ring / D-over-C path
    assert "gemv-fp32-nn-1x1023x4099-chosen-relu" in names  # issue 66's export, as it was exported
    missing = set(VARIANTS) - set(_chosen_variants().values())
    assert not missing, f"no case lands on the gemv variant(s) {sorted(missing)}"


def test_every_tool_runs_every_gemv_variant():
    """Each variant's shape lands on that variant under every epilogue it runs with; every tool runs them."""
    picked = _chosen_variants()
    for expected, *row in VARIANT_SHAPES:
        shape = spec_of(*row)
        assert {v for case, v in picked.items() if case.spec.without_epilogue() == shape} == {expected}, row
    for tool in TOOLS:
        assert {v for case, v in picked.items() if _runs_under(case, tool)} == set(VARIANTS), tool


def test_synccheck_runs_every_family_and_the_cluster_kernels():
    under_synccheck = [case for case in _cases("sm_90") if _runs_under(case, "synccheck")]
    assert {case.family for case in under_synccheck} == {family for family, *_ in SHAPES}
    clusters = {case.family for case in under_synccheck if getattr(case.config, "cluster_m", 1) > 1}
    assert clusters == {"wgmma"}  # (the gemv K split's cluster is the chosen config's: k_splits)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("tool", TOOLS)
def test_no_sanitizer_reports_on_edge_tiles(harnesses, tool):
    runs = _run_tool(harnesses, tool)
    failed = {name: (code, _errors(out), out.strip().splitlines()[:8])
              for name, (code, out) in runs.items() if code != 0 or _errors(out) != 0}
    assert not failed, f"{tool}: {len(failed)} of {len(runs)} case(s) failed: " + "\n".join(
        f"{name}: exit {code}, {errors} errors: " + " | ".join(lines) for name, (code, errors, lines) in failed.items())
