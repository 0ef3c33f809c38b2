"""Baselines: what a user could run instead of gemmtune for the same GEMM, side by side in `bench`.

Each module is one baseline behind the small protocol in base.py (name, available(spec),
row(spec, protocol, arch)); every one is checked by gemmtune's verifier (float64 reference,
per-dtype tolerance) and timed by gemmtune's protocol (timing.measure) on the same inputs.
Heavy packages (torch, triton, cutlass, tvm) are imported only when a baseline runs.
"""
from __future__ import annotations

import importlib
from typing import Callable

from ..bench import BenchRow
from ..errors import SpecError
from ..spec import GemmSpec
from ..timing import TimingProtocol
from .base import Baseline, Skipped

# Table order; the module of each name holds BASELINE.
NAMES = ("cublas", "eager", "cutlass", "triton", "inductor", "tvm")
_MODULES = {"cublas": "cublas", "eager": "eager", "cutlass": "cutlass", "triton": "triton_matmul",
            "inductor": "inductor", "tvm": "tvm_dlight"}


def baseline(name: str) -> Baseline:
    return importlib.import_module(f"{__name__}.{_MODULES[name]}").BASELINE


def parse_names(text: str | None) -> tuple[str, ...] | None:
    """`--baselines a,b` as names in table order; None for the default (all available); SpecError
    for an unknown name. 'none' asks for no baseline."""
    if text is None:
        return None
    wanted = [part.strip().lower() for part in text.split(",") if part.strip()]
    if wanted == ["none"]:
        return ()
    unknown = [name for name in wanted if name not in NAMES]
    if unknown:
        raise SpecError(f"unknown baseline(s) {', '.join(unknown)}; known: {', '.join(NAMES)}")
    return tuple(name for name in NAMES if name in wanted)


# The baselines run torch.mm-like GEMMs of 16- and 32-bit types; torch._scaled_mm is no row yet.
FP8_NO_BASELINE = "no fp8 baseline row yet (bench/probes/fp8_scaled.py times scaled_mm against torch._scaled_mm)"


def resolve(names: tuple[str, ...] | None, spec: GemmSpec,
            lookup=baseline) -> tuple[list[Baseline], list[Skipped]]:
    """The baselines to run for `spec` (those named, default all) and those skipped, with why."""
    chosen, skipped = [], []
    for name in NAMES if names is None else names:
        candidate = lookup(name)
        reason = FP8_NO_BASELINE if spec.fp8 else candidate.available(spec)
        if reason is None:
            chosen.append(candidate)
        else:
            skipped.append(Skipped(name, reason))
    return chosen, skipped


def side_by_side(spec: GemmSpec, chosen: list[Baseline], ours: Callable[[], list[BenchRow]],
                 protocol: TimingProtocol, arch: str,
                 on_row: Callable[[BenchRow], None] | None = None) -> list[BenchRow]:
    """cuBLAS's row (when chosen), then gemmtune's rows (`ours()`), then every other baseline's."""
    def run(group: list[Baseline]) -> list[BenchRow]:
        rows = []
        for item in group:
            rows.append(item.row(spec, protocol, arch))
            if on_row:
                on_row(rows[-1])
        return rows

    first = [b for b in chosen if b.name == "cublas"]
    return run(first) + ours() + run([b for b in chosen if b.name != "cublas"])
