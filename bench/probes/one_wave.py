"""Moved picks of the one-wave rule (chooser.one_wave_first) on shapes drawn outside every evaluation set: old vs new, in turn with cuBLAS.

    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/one_wave.py out.json 12
"""
import random, sys, json
sys.path.insert(0, "bench"); sys.path.insert(0, "bench/probes")
import gemmtune.chooser as ch
from gemmtune.spec import GemmSpec
from model_shapes import suite
from bench_untuned import EVAL_SHAPES
from ab_timing import time_moved_picks
excl = {g.shape for g in suite()} | set(EVAL_SHAPES)


def old_rank(spec):
    saved = ch.one_wave_first
    ch.one_wave_first = lambda s, p, n: p
    try:
        return ch.rank(spec, "sm_90a", 132)[0].config
    finally:
        ch.one_wave_first = saved


def draw(seed, count, dtype, epilogue=""):
    rng = random.Random(seed); out = []; tries = 0
    while len(out) < count and tries < 4000:
        tries += 1
        m = 8 * round(2 ** rng.uniform(6.5, 10.2) / 8); n = 64 * round(2 ** rng.uniform(9, 13.2) / 64); k = 64 * round(2 ** rng.uniform(8, 13.5) / 64)
        if (m, n, k) in excl:
            continue
        spec = GemmSpec(m, n, k, "nt", dtype, epilogue=epilogue) if epilogue else GemmSpec(m, n, k, "nt", dtype)
        new = ch.rank(spec, "sm_90a", 132)[0].config
        old = old_rank(spec)
        if new != old:
            out.append((spec, old, new))
    return out


if __name__ == "__main__":
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    cases = draw(31, n, "bf16") + draw(32, n // 2, "fp16") + draw(33, n // 3, "bf16", "bias_col+gelu")
    rows = time_moved_picks(cases, ["bf16", "fp16"])
    json.dump(rows, open(sys.argv[1], "w"), indent=1)
