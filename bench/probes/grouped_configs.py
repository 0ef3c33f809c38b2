"""Which grouped tile configuration wins where (issue 69): every candidate of grouped.config (ping-pong
ones included; bands of tile rows where BANDS names some), timed against torch._grouped_mm on MoE shapes that bench_moe.py does not
hold (its cases are the evaluation set), in CUDA graphs, rounds in a balanced order.

    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/grouped_configs.py --out /tmp/grouped_configs.md
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@dataclass(frozen=True)
class Shape:
    name: str
    experts: int
    rows: int  # routed rows in all (tokens x experts per token)
    n: int
    k: int
    routing: str = "balanced"


# Public MoE configs not in bench_moe.py: Qwen2-57B-A14B (64 experts, 3584 <-> 2560), DeepSeek-V2-Lite
# (64 experts, 2048 <-> 1408), Grok-1-like (8 experts, 6144 <-> 32768: up of 8192 columns here, a slice), Arctic-like
# (128 experts, 7168 <-> 4864), OLMoE (64 experts, 2048 <-> 1024), each at a few token counts.
SHAPES = (Shape("qwen2-57b up 8k tok", 64, 8192 * 8, 5120, 3584), Shape("qwen2-57b down 8k tok", 64, 8192 * 8, 3584, 2560),
          Shape("qwen2-57b up 512 tok", 64, 512 * 8, 5120, 3584, "zipf"),
          Shape("dsv2-lite up 4k tok", 64, 4096 * 6, 2816, 2048), Shape("dsv2-lite down 32k tok zipf", 64, 32768 * 6, 2048, 1408, "zipf"),
          Shape("grok-like up 8k tok", 8, 8192 * 2, 8192, 6144), Shape("grok-like down 1k tok", 8, 1024 * 2, 6144, 8192),
          Shape("arctic-like up 4k tok", 128, 4096 * 2, 9728, 7168, "zipf"),
          Shape("olmoe up 16k tok", 64, 16384 * 8, 2048, 2048), Shape("olmoe down 16k tok zipf", 64, 16384 * 8, 2048, 1024, "zipf"),
          Shape("attention-like 16 heads", 16, 16 * 1024, 1024, 128), Shape("short K 32 x 2048 rows", 32, 32 * 2048, 4096, 512))


BANDS: tuple[int, ...] = ()  # bands of tile rows to time beside the candidates (a05247f timed 4, 8, 16: no effect)


def configs(spec):
    from gemmtune.grouped.config import GroupedConfig, _deepest, candidates, rejections

    found = list(candidates(spec))
    for base in (GroupedConfig(128, 128, consumers=2), GroupedConfig(128, 256, consumers=2)):
        for band in BANDS:
            c = _deepest(base.with_(band_m=band), spec)
            if c not in found and not rejections(c, spec):
                found.append(c)
    return found


def measure(shape: Shape, rounds: int) -> list[tuple[str, float, float]]:
    import torch

    from bench_models import graph_times
    from bench_moe import group_rows
    from gemmtune.grouped.launch import build
    from gemmtune.grouped.spec import GroupedSpec

    rows = group_rows(shape.experts, shape.rows, shape.routing)
    x = torch.randn(sum(rows), shape.k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(shape.experts, shape.n, shape.k, device="cuda", dtype=torch.bfloat16) / shape.k ** 0.5
    offs = torch.tensor(rows, device="cuda").cumsum(0).to(torch.int32)
    spec = GroupedSpec(shape.experts, sum(rows), shape.n, shape.k, "bf16")
    want = torch._grouped_mm(x, w.transpose(1, 2), offs=offs)
    calls = {"torch": lambda: torch._grouped_mm(x, w.transpose(1, 2), offs=offs)}
    labels = {}
    for config in configs(spec):
        kernel = build(spec, config)
        label = (f"{config.bm}x{config.bn} s{config.stages} c{config.consumers}{' pp' if config.pingpong else ''}"
                 f"{' st' if config.staged_store else ''}"
                 f"{f' band{config.band_m}' if config.band_m else ''}")
        out = torch.full_like(want, float("nan"))

        def call(kernel=kernel, out=out):
            kernel(x.data_ptr(), w.data_ptr(), offs.data_ptr(), out.data_ptr(), None,
                   torch.cuda.current_stream().cuda_stream)
            return out
        call()
        torch.cuda.synchronize()
        err = float((out.float() - want.float()).abs().max() / want.float().abs().max())
        if not err < 1e-2:
            print(f"probe: {shape.name} {label}: wrong (max rel error {err})", file=sys.stderr)
            continue
        calls[label], labels[label] = call, err
    times = graph_times(torch, calls, rounds)
    torch_us = statistics.median(times["torch"])
    return [(name, statistics.median(t), torch_us / statistics.median(t)) for name, t in times.items() if name != "torch"] \
        + [("torch._grouped_mm", torch_us, 1.0)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = ["| shape | G | rows | N×K | config | µs | × torch._grouped_mm |", "|---|---:|---:|---|---|---:|---:|"]
    for shape in SHAPES:
        for name, us, x in sorted(measure(shape, args.rounds), key=lambda row: row[1]):
            lines.append(f"| {shape.name} | {shape.experts} | {shape.rows} | {shape.n}×{shape.k} | {name} | {us:.1f} | {x:.2f} |")
        if args.out:
            args.out.write_text("\n".join(lines) + "\n")
        print("\n".join(lines[-3:]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
