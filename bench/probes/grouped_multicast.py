"""Does sharing A over clusters of two pay on large groups (issue 69)? The grouped default config against its
cluster=2 twin and the other cluster=2 candidates (two blocks on one m-tile and adjacent tile columns, each
loading half of A and multicasting it), and torch._grouped_mm, on large-group shapes that bench_moe.py does not
hold (its cases are the evaluation set). Each config's D is checked against torch's before it is timed; CUDA
graphs, rounds in a balanced order (bench_models.graph_times). The table comes last.

    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/grouped_multicast.py [--rounds 10] [--out /tmp/multicast.md]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MAX_ERROR = 1e-2  # max |ours - torch| over the largest |torch|: a config past it is reported, not timed


@dataclass(frozen=True)
class Shape:
    name: str
    rows: tuple[int, ...]  # each group's rows
    n: int
    k: int


def _uneven(groups: int, low: int, high: int) -> tuple[int, ...]:
    """`groups` sizes spread evenly from low to high, in a fixed shuffled order."""
    import random

    sizes = [low + (high - low) * g // max(groups - 1, 1) for g in range(groups)]
    random.Random(69 + groups).shuffle(sizes)
    return tuple(sizes)


# Large groups (thousands of rows an expert), where torch's CUTLASS kernel multicasts over clusters; none of
# them is a bench_moe.py case. N = 1408 and 5760: odd counts of 128-column tiles (the last pair half idle).
SHAPES = (Shape("G8 x 2048 N14336 K4096", (2048,) * 8, 14336, 4096),
          Shape("G8 x 2000-6000 N4096 K6144", _uneven(8, 2000, 6000), 4096, 6144),
          Shape("G8 x 6000 N14336 K6144", (6000,) * 8, 14336, 6144),
          Shape("G8 x 3000 N4096 K4096", (3000,) * 8, 4096, 4096),
          Shape("G8 x 2000-6000 N5760 K4096", _uneven(8, 2000, 6000), 5760, 4096),
          Shape("G64 x 512 N4096 K4096", (512,) * 64, 4096, 4096),
          Shape("G64 x 256-768 N2048 K6144", _uneven(64, 256, 768), 2048, 6144),
          Shape("G64 x 512 N1408 K4096", (512,) * 64, 1408, 4096))


def configs(spec) -> list:
    """The default, then each cluster=2 candidate after its twin without clusters (the default's first)."""
    from gemmtune.grouped.config import candidates, default_config

    found = [default_config(spec)]
    for config in (c for c in candidates(spec) if c.cluster == 2):
        found += [c for c in (config.with_(cluster=1), config) if c not in found]
    return found


def label(config) -> str:
    return (f"{config.bm}x{config.bn} s{config.stages} c{config.consumers}{' pp' if config.pingpong else ''}"
            f"{' st' if config.staged_store else ''}{f' band{config.band_m}' if config.band_m else ''}"
            f"{' cl2' if config.cluster == 2 else ''}")


def measure(shape: Shape, rounds: int) -> list[tuple[str, float]]:
    """(label, median µs) of torch._grouped_mm and each config that matches it."""
    import torch

    from bench_models import graph_times
    from gemmtune.grouped.launch import build
    from gemmtune.grouped.spec import GroupedSpec

    groups, total = len(shape.rows), sum(shape.rows)
    x = torch.randn(total, shape.k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(groups, shape.n, shape.k, device="cuda", dtype=torch.bfloat16) / shape.k ** 0.5
    offs = torch.tensor(shape.rows, device="cuda").cumsum(0).to(torch.int32)
    spec = GroupedSpec(groups, total, shape.n, shape.k, "bf16")
    want = torch._grouped_mm(x, w.transpose(1, 2), offs=offs).float()
    scale = float(want.abs().max())
    calls = {"torch._grouped_mm": lambda: torch._grouped_mm(x, w.transpose(1, 2), offs=offs)}
    for config in configs(spec):
        kernel, out = build(spec, config), torch.full((total, shape.n), float("nan"), device="cuda", dtype=torch.bfloat16)

        def call(kernel=kernel, out=out):
            kernel(x.data_ptr(), w.data_ptr(), offs.data_ptr(), out.data_ptr(), None, torch.cuda.current_stream().cuda_stream)
            return out
        call()
        torch.cuda.synchronize()
        error = float((out.float() - want).abs().max()) / scale
        if not error < MAX_ERROR:  # NaN (a row left unwritten) fails too
            print(f"probe: {shape.name} {label(config)}: WRONG (max error {error:.2e} of the largest value)", file=sys.stderr)
            continue
        calls[label(config)] = call
    del want
    times = graph_times(torch, calls, rounds)
    return [(name, statistics.median(t)) for name, t in times.items()]


def rows_of(shape: Shape, results: list[tuple[str, float]]) -> list[str]:
    us = dict(results)
    torch_us = us.pop("torch._grouped_mm")
    default = next(iter(us.values()), float("nan"))  # the default config is timed first
    lines = [f"| {shape.name} | {name} | {t:.1f} | {torch_us / t:.2f} | {default / t:.2f} |" for name, t in us.items()]
    return lines + [f"| {shape.name} | torch._grouped_mm | {torch_us:.1f} | 1.00 | {default / torch_us:.2f} |"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = ["| shape | config | µs | × torch._grouped_mm | × default |", "|---|---|---:|---:|---:|"]
    for shape in SHAPES:
        lines += rows_of(shape, measure(shape, args.rounds))
        print(f"probe: {shape.name} timed", file=sys.stderr, flush=True)
        if args.out:
            args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
