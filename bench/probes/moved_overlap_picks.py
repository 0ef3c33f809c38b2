# run: PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/moved_overlap_picks.py
"""The eval-set picks moved by 603d761 (no overlap on one consumer's 64-row tiles), old vs new, timed side by side."""
import sys
sys.path.insert(0, "bench/probes"); sys.path.insert(0, "bench")
from ab_timing import time_moved_picks
import importlib
from gemmtune.chooser import choose
cand = importlib.import_module("gemmtune.chooser.candidates")
from gemmtune.spec import GemmSpec

SHAPES = ("128x4096x14336", "64x8192x8192", "4096x128x4096", "1000x1000x1000", "64x14336x4096", "32x4096x11008")


def old_rule(config, spec):
    return not (config.consumers == 2 and config.bn < cand.OVERLAP_MIN_BN and spec.dtype in ("bf16", "fp16"))


def main():
    cases = []
    for dtype in ("bf16", "fp16"):
        for shape in SHAPES:
            spec = GemmSpec(*(int(x) for x in shape.split("x")), "nt", dtype)
            new = choose(spec, "sm_90a").config
            saved, cand.overlap_pays = cand.overlap_pays, old_rule
            try:
                old = choose(spec, "sm_90a").config
            finally:
                cand.overlap_pays = saved
            if old != new:
                cases.append((spec, old, new))
    time_moved_picks(cases, ["bf16", "fp16"])


if __name__ == "__main__":
    main()
