"""Does the grouped kernel (one group) beat the wgmma family's pick on plain GEMMs of the model-shape regimes
(issue 67)? Shapes from public configs outside bench_models.py's suite; bf16, nt (weights stored (N, K)).
cuBLAS (torch.mm), gemmtune.torch.mm (the chooser's pick) and every grouped candidate with G = 1, each
checked against a float64 reference, then timed in CUDA graphs, rounds in a balanced order, medians (no L2 flush).

    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/grouped_as_gemm.py --out /tmp/grouped_as_gemm.md
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = ((5000, 768, 3072), (3000, 1024, 4096), (7040, 896, 4096), (3072, 384, 5120), (5120, 640, 2560),
          (1536, 1280, 1280), (9216, 1280, 1536), (200, 2048, 1536), (640, 5632, 2048), (1024, 3072, 9216),
          (2304, 2304, 4096), (4096, 4096, 4096))


def measure(m: int, n: int, k: int, rounds: int) -> list[tuple[str, float, float, float]]:
    import torch

    import gemmtune.torch as gt
    from bench_models import graph_replay
    from gemmtune.grouped.config import candidates
    from gemmtune.grouped.launch import build
    from gemmtune.grouped.spec import GroupedSpec
    from gemmtune.timing import round_order

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    want = a.double() @ w.double().t()
    offs = torch.tensor([m], device="cuda", dtype=torch.int32)
    calls = {"cuBLAS": lambda: torch.mm(a, w.t()), "gemmtune pick": lambda: gt.mm(a, w.t())}
    spec = GroupedSpec(1, m, n, k, "bf16")
    for config in candidates(spec):
        kernel = build(spec, config)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

        def call(kernel=kernel, out=out):
            kernel(a.data_ptr(), w.data_ptr(), offs.data_ptr(), out.data_ptr(), None, torch.cuda.current_stream().cuda_stream)
            return out
        calls[f"grouped {config.bm}x{config.bn} s{config.stages} c{config.consumers}"
              f"{' pp' if config.pingpong else ''}{' st' if config.staged_store else ''}"] = call
    errors = {}
    for name, call in calls.items():
        got = call().double()
        torch.cuda.synchronize()
        errors[name] = float((got - want).abs().max() / want.abs().max())
    replays = {name: graph_replay(torch, call)[0] for name, call in calls.items() if errors[name] < 1e-2}
    times: dict[str, list[float]] = {name: [] for name in replays}
    for r in range(rounds):
        for name in round_order(list(replays), r):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            replays[name]()
            stop.record()
            stop.synchronize()
            times[name].append(start.elapsed_time(stop) * 1e3)
    base = statistics.median(times["cuBLAS"])
    return [(name, statistics.median(t), base / statistics.median(t), errors[name]) for name, t in times.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = ["| M×N×K | kernel | µs | × cuBLAS | error |", "|---|---|---:|---:|---:|"]
    for m, n, k in SHAPES:
        rows = sorted(measure(m, n, k, args.rounds), key=lambda row: row[1])
        lines += [f"| {m}x{n}x{k} | {name} | {us:.1f} | {x:.2f} | {err:.1e} |" for name, us, x, err in rows]
        pick = next(x for name, _, x, _ in rows if name == "gemmtune pick")
        print(f"{m}x{n}x{k}: pick {pick:.2f}, best {rows[0][0]} {rows[0][2]:.2f}", flush=True)
        if args.out:
            args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
