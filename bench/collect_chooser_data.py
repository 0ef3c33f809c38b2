"""Time the chooser's candidates on training shapes (none of them bench_untuned's shapes) -> CSV.

    python bench/collect_chooser_data.py --out rows.csv --budget 200

Each shape's candidates are compiled in parallel, its inputs uploaded once, and every candidate
launched once, checked against the float64 reference (shapes up to 2^22 outputs; larger ones are
checked by the GPU tests and bench_untuned), then timed (short protocol, L2 flushed). A wrong or
failing kernel is written with its status and no time. The CSV is what `gemmtune db train --csv`
reads.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

from gemmtune.build import compile_configs
from gemmtune.chooser import rank
from gemmtune.chooser.candidates import candidates
from gemmtune.device import query_device
from gemmtune.errors import GemmtuneError
from gemmtune.evaluate import check_output, upload_inputs
from gemmtune.kernels import family_for
from gemmtune.runtime import LoadedKernel, synchronize
from gemmtune.spec import GemmSpec
from gemmtune.timing import TimingProtocol, measure, measure_alternating
from gemmtune.verify import make_inputs, reference

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_untuned import EVAL_SHAPES as BENCH_SHAPES  # noqa: E402  (training must not see the measured shapes)
from model_shapes import suite  # noqa: E402

# The other evaluation sets' shapes: the model-shape suite (bench_models.py), drawn around but never on.
EVALUATED_ELSEWHERE = frozenset(g.shape for g in suite())

PROTOCOL = TimingProtocol(warmup=2, min_reps=5, max_reps=30, min_time_s=0.015)
CHECK_LIMIT = 1 << 22  # outputs
CHECK_MACS = 1 << 35  # and multiply-adds: the float64 reference runs on the host CPU
FIELDS = ("family", "m", "n", "k", "layout", "dtype", "config", "median_s", "status", "gpu", "sm_count")


def training_shapes(seed: int = 1) -> list[tuple[int, int, int]]:
    """Log-uniform shapes plus skinny and GEMV ones, none equal to a bench shape."""
    rng = random.Random(seed)
    pick = lambda lo, hi: int(round(2 ** rng.uniform(lo, hi)))  # noqa: E731
    shapes = [(pick(8, 13.3), pick(8, 13.3), pick(8, 13.5)) for _ in range(20)]
    shapes += [(pick(3, 8), pick(11, 13.5), pick(10, 14)) for _ in range(8)]  # skinny M, long K
    shapes += [(pick(11, 13.5), pick(3, 8), pick(10, 14)) for _ in range(3)]  # skinny N
    shapes += [(pick(9, 11), pick(9, 11), pick(13, 15)) for _ in range(3)]  # few tiles, very long K
    shapes += [(1, pick(10, 15), pick(10, 14)) for _ in range(6)] + [(pick(10, 14), 1, pick(10, 14)) for _ in range(2)]
    bench = {(m, n, k) for m, n, k in BENCH_SHAPES}
    return [(m, n, k - k % 8 or 8) for m, n, k in shapes if (m, n, k - k % 8 or 8) not in bench]


def extra_shapes() -> list[tuple[int, int, int]]:
    """The second round: large shapes (the first round stopped at ~90 GFLOP), small ones, more GEMVs."""
    large = [(6000, 7000, 3000), (3500, 9000, 5000), (10000, 2500, 4000), (8000, 8000, 1504), (7168, 3072, 7168)]
    small = [(150, 250, 600), (300, 200, 1200), (700, 900, 304), (96, 2000, 3000), (2000, 96, 6000)]
    gemv = [(1, 2048, 8192), (1, 14336, 4096), (1, 6000, 6000), (1, 24000, 2048), (4, 8000, 4096), (12, 5000, 5000)]
    return large + small + gemv


SMALL_TILE = 32  # the third round times only the simt candidates with a 32-wide tile side

# The wgmma round: every candidate as the chooser now builds it (write-back options, split tails), in
# the regimes the evaluation set showed mis-ranked (medium M with large N and K, ~1000-cubed, skinny N,
# few tiles with a long K) and general ones; 2-byte, tf32 and fp32 (3xTF32) inputs in the evaluation
# set's layouts. GFLOP caps keep one device call under ten minutes.
WGMMA_REGIMES = (  # name, shapes, log2 ranges of M, N, K
    ("general", 40, (8, 13.5), (8, 13.5), (8, 14)),
    ("medium M", 20, (8, 10.5), (11, 14), (10, 14)),
    ("near cube", 15, (9, 11.5), (9, 11.5), (9, 11.5)),
    ("skinny N", 12, (11, 14), (6, 8.5), (10, 14)),
    ("long K", 15, (6, 10), (6, 10), (13, 16)),
    ("large", 12, (12, 14), (12, 14), (10, 13)),
)
# The second wgmma round: the regimes the first left out (M from 17, where gemv stops, to 512; few
# tiles with a very long K), which the first round's model ranked worse than the old one on the
# evaluation set's small-M shapes (git show d8ef8a3:bench/results/2026-11-26-h100-chooser-model-ab.md).
WGMMA_SMALL_M_REGIMES = (
    ("small M", 30, (4.1, 7), (11, 14.5), (10, 14)),
    ("M 128-512", 15, (7, 9), (10, 14), (10, 14.5)),
    ("few tiles, very long K", 10, (7, 10), (7, 10), (13, 16.5)),
)
# The third wgmma round: dimensions multiples of 128, as in the models people run (the first two
# drew multiples of 8, so half their rows start 16 bytes off a sector), in the regimes whose eval
# picks the space beat by 10-20% (2048x5120x5120 bf16 0.83x where 128x256 runs 0.98x, 1536x6144x1536
# 0.81x where 64x256 runs 0.91x), and few tiles with a long K, where the candidates now include
# clusters that multicast B (chooser/candidates.py: cluster_sizes).
WGMMA_ALIGNED_REGIMES = (
    ("large", 24, (10, 13), (11, 14), (10, 13)),
    ("medium", 14, (9, 11.5), (10, 13.5), (9, 12)),
    ("few tiles, long K", 14, (7.5, 10.5), (7.5, 10.5), (13, 16)),
)
# The fourth: the regimes where that round's model lost on the evaluation set (512x4096x4096 0.88 ->
# 0.75x on a 128x192 tile where 128x128 fills one wave, 4096x128x4096 0.90 -> 0.83x, 96x96x65536),
# dimensions multiples of 64, none an evaluation shape.
WGMMA_ALIGNED_2_REGIMES = (
    ("M 256-1024", 20, (8, 10), (11, 13), (11, 13)),
    ("skinny N", 12, (11, 13.3), (6, 8.5), (10, 13)),
    ("tiny tiles, long K", 10, (6, 8), (6, 8), (14, 16.5)),
)
# The fifth: the regimes of the evaluation rows still under 0.85x whose space holds a faster kernel
# than the pick (4096x128x4096 0.79x where 64x128 runs 0.88x; 1000^3 0.77x, 128x128 split 0.88x;
# 5000x300x2048 tf32 0.80x, 128x192 0.88x; 2048x2048x8192 tf32 0.85x), in bf16 and tf32 alike,
# dimensions multiples of 8 (1000 and 300 are not multiples of 64), none an evaluation shape.
WGMMA_MISRANKED_REGIMES = (
    ("tall, skinny N", 14, (11, 13.3), (6, 8.3), (11, 13)),
    ("near cube, about one wave", 12, (9.4, 10.6), (9.4, 10.6), (9.4, 10.6)),
    ("square, long K", 10, (10.5, 11.5), (10.5, 11.5), (12.3, 13.5)),
)
# The sixth, on an H200 (the five before ran on an H100, whose HBM is 30% slower): the regimes of the
# model-shape suite's weakest rows (issue 67), drawn, never taken from a model: one routed expert's
# tokens (M 45-2048 in steps of 8) on an expert's weights, many rows on a narrow projection (N 256-1536),
# few tiles with a very long K, short K, and prefill GEMMs; every candidate the chooser ranks (its rules'
# picks included) timed in turn, so each shape also says how far the untuned pick is from its best.
# The sixth element of a regime, where given, is M's step (token counts are not multiples of 64).
WGMMA_MODEL_REGIMES = (
    ("one expert's tokens", 24, (5.5, 11), (9, 13), (9, 13), 8),
    ("many rows, narrow N", 14, (10, 13), (8, 10.6), (9, 12)),
    ("few tiles, very long K", 12, (10, 12), (10, 12), (13, 15)),
    ("short K", 10, (10, 13), (10, 13), (8, 10)),
    ("prefill", 14, (10, 13), (10, 14), (10, 13)),
)
WGMMA_DTYPES = (("bf16", "nt", 1.0, 400e9), ("tf32", "nt", 0.5, 150e9), ("fp32", "nn", 0.25, 60e9))  # share, FLOP cap


def wgmma_shapes(dtype_share: float, flop_cap: float, seed: int, regimes=WGMMA_REGIMES,
                 multiple: int = 8) -> list[tuple[int, int, int]]:
    """Seeded shapes of every regime (a share of each), dimensions multiples of `multiple`, none an
    evaluation shape, 2·M·N·K at most `flop_cap`."""
    rng = random.Random(seed)
    draw = lambda lo, hi, step=multiple: max(step, int(round(2 ** rng.uniform(lo, hi) / step)) * step)  # noqa: E731
    bench = set(BENCH_SHAPES) | EVALUATED_ELSEWHERE
    shapes = []
    for _, count, m, n, k, *m_step in regimes:
        for _ in range(max(1, round(count * dtype_share))):
            for _ in range(20):  # redraw until under the cap
                shape = (draw(*m, *m_step), draw(*n), draw(*k))
                if 2 * shape[0] * shape[1] * shape[2] <= flop_cap and shape not in bench:
                    shapes.append(shape)
                    break
    return shapes


WGMMA_ROUNDS = {"wgmma": (WGMMA_REGIMES, 11, 8, WGMMA_DTYPES), "wgmma-small-m": (WGMMA_SMALL_M_REGIMES, 21, 8, WGMMA_DTYPES),
                "wgmma-aligned": (WGMMA_ALIGNED_REGIMES, 31, 128, WGMMA_DTYPES[:2]),
                "wgmma-aligned-2": (WGMMA_ALIGNED_2_REGIMES, 41, 64, WGMMA_DTYPES[:2]),
                "wgmma-misranked": (WGMMA_MISRANKED_REGIMES, 51, 8, (WGMMA_DTYPES[0], ("tf32", "nt", 0.8, 200e9))),
                "wgmma-models": (WGMMA_MODEL_REGIMES, 61, 64, WGMMA_DTYPES[:1])}  # regimes, seed, multiple, dtypes


def wgmma_specs(which: str = "wgmma") -> list[GemmSpec]:
    """A wgmma round's specs, dtypes interleaved so a budget cut leaves each a share."""
    regimes, first_seed, multiple, dtypes = WGMMA_ROUNDS[which]
    per_dtype = [[GemmSpec(m, n, k, layout, dtype) for m, n, k in wgmma_shapes(share, cap, seed, regimes, multiple)]
                 for seed, (dtype, layout, share, cap) in enumerate(dtypes, start=first_seed)]
    return [spec for group in itertools.zip_longest(*per_dtype) for spec in group if spec is not None]


def specs(which: str = "first") -> list[GemmSpec]:
    if which in WGMMA_ROUNDS:
        return wgmma_specs(which)
    if which == "small":  # fp32 shapes of the earlier rounds with at most 4M outputs
        return [GemmSpec(m, n, k) for m, n, k in training_shapes() + extra_shapes()
                if m * n <= 1 << 22 and m > 16 and n > 1 and (m, n, k) not in set(BENCH_SHAPES)]
    shapes = training_shapes() if which == "first" else extra_shapes()
    bench = set(BENCH_SHAPES)
    return [GemmSpec(m, n, k, layout, dtype) for m, n, k in shapes if (m, n, k) not in bench
            for dtype, layout in (("fp32", "nn"), ("bf16", "nt"))]


def jobs_for(spec: GemmSpec, arch: str, sm_count: int, most: int = 28, small_only: bool = False,
             ranked: bool = False) -> list:
    """The spec's candidates, thinned evenly to `most` (gemv has up to 80 near-twins). `ranked`: every
    config the chooser ranks (its rules' picks too), its pick first and always kept."""
    if ranked:
        configs = [p.config for p in rank(spec, arch, sm_count)]
        step = max(1, -(-(len(configs) - 1) // (most - 1)))
        return [(spec, c, arch) for c in configs[:1] + configs[1::step]]
    configs = candidates(family_for(spec, arch).name, spec, arch, sm_count)
    if small_only:
        configs = [c for c in configs if min(c.bm, c.bn) == SMALL_TILE]
    step = max(1, -(-len(configs) // most))
    return [(spec, c, arch) for c in configs[::step]]


IN_TURN_ROUNDS = 15  # --in-turn: rounds of every candidate launched once, L2 emptied before each launch
IN_TURN_PROTOCOL = TimingProtocol(warmup=2, flush_mode="read")


def time_shape(spec: GemmSpec, jobs: list, compiled: list, sm_count: int, gpu: str, writer,
               protocol: TimingProtocol = PROTOCOL, in_turn: bool = False) -> int:
    """A row per job: each compiled kernel checked, then timed on its own (`protocol`), or, `in_turn`, those
    that pass timed together (timing.measure_alternating: each launched once a round, so the power limit's
    clock moves them all alike; the median of IN_TURN_ROUNDS) with a last column `pick`, 1 on the chooser's
    pick (the first job)."""
    family = family_for(spec, jobs[0][2])
    inputs = make_inputs(spec, np.random.default_rng(0))
    expected = reference(spec, inputs) if spec.m * spec.n <= CHECK_LIMIT and spec.m * spec.n * spec.k <= CHECK_MACS else None
    buffers = {}
    bindings = upload_inputs(spec, inputs, buffers)
    info = query_device()
    status, medians, launches, loaded = [], {}, {}, []
    try:
        for i, result in enumerate(compiled):
            if isinstance(result, GemmtuneError):
                status.append(f"compile: {str(result)[:80]}")
                continue
            try:
                kernel = LoadedKernel(result)
                loaded.append(kernel)
                launch = kernel.bind(bindings)
                buffers["D"].fill_nan(spec.out_dtype)
                launch()
                synchronize()
                wrong = expected is not None and not check_output(buffers["D"], spec, expected).ok
                status.append("wrong" if wrong else "ok")
                if not wrong and in_turn:
                    launches[i] = launch
                elif not wrong:
                    medians[i] = measure(launch, protocol, info.l2_bytes).median_s
                    loaded.pop().unload()
            except GemmtuneError as err:
                status.append(f"error: {str(err)[:80]}")
        if launches:
            times = measure_alternating(launches, IN_TURN_ROUNDS, info.l2_bytes, IN_TURN_PROTOCOL)
            medians = {i: float(np.median(t)) for i, t in times.items()}
        for i, (_, config, _) in enumerate(jobs):
            median = medians.get(i)
            writer.writerow([family.name, spec.m, spec.n, spec.k, spec.layout, spec.dtype,
                             json.dumps(config.to_json(), sort_keys=True), "" if median is None else f"{median:.6g}",
                             status[i], gpu, sm_count] + ([int(i == 0)] if in_turn else []))
    finally:
        for kernel in loaded:
            kernel.unload()
        for b in buffers.values():
            b.free()
    return len(jobs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, default=200.0, help="seconds; stops after the shape that passes it")
    parser.add_argument("--set", dest="which", choices=("first", "extra", "small", *WGMMA_ROUNDS), default="first", help="which shapes")
    parser.add_argument("--most", type=int, default=28, help="candidates per shape at most (thinned evenly)")
    parser.add_argument("--part", default="1/1", help="i/n: time the i-th of n interleaved slices of the set's specs")
    parser.add_argument("--in-turn", action="store_true",
                        help="every config the chooser ranks, its pick marked, timed in turn (time_shape)")
    args = parser.parse_args()
    part, parts = (int(x) for x in args.part.split("/"))
    info = query_device()
    start = time.time()
    with open(args.out, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FIELDS + (("pick",) if args.in_turn else ()))
        todo = specs(args.which)[part - 1::parts]
        per_spec = [jobs_for(spec, info.arch, info.sm_count, args.most, args.which == "small", args.in_turn)
                    for spec in todo]
        flat = [job for jobs in per_spec for job in jobs]
        compiled = compile_configs(flat)  # one pool for everything: NVRTC is the slow part
        print(f"{time.time() - start:6.1f}s compiled {len(flat)} kernels", flush=True)
        at = 0
        for i, (spec, jobs) in enumerate(zip(todo, per_spec)):
            if time.time() - start > args.budget:
                print(f"budget spent after {i} of {len(todo)} shapes")
                break
            n = time_shape(spec, jobs, compiled[at:at + len(jobs)], info.sm_count, info.name, writer,
                           in_turn=args.in_turn)
            at += len(jobs)
            handle.flush()
            print(f"{time.time() - start:6.1f}s {spec.short()}: {n} configs", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
