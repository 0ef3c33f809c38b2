# run: PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/decode_split_min.py OUT.json
"""Decode rows: split_min (finer K splits) on shapes outside the suite."""
import sys
from dataclasses import replace
from pathlib import Path
sys.path.insert(0, "bench/probes")
from ab_timing import time_variants
from gemmtune.chooser import rank
from gemmtune.spec import GemmSpec

SHAPES = [(24, 3072, 3072), (40, 5120, 5120), (56, 1024, 5120), (24, 14336, 5120), (40, 5120, 14336),
          (17, 2048, 8192), (64, 6144, 2048), (33, 1536, 1536)]


def main():
    cases = []
    for m, n, k in SHAPES:
        spec = GemmSpec(m, n, k, "nt", "bf16")
        p = rank(spec, "sm_90a", family="wgmma")[0].config
        seen = set()
        def add(label, c):
            if c not in seen:
                seen.add(c); cases.append((spec, label, c))
        add("pick", p)
        for bn in sorted({p.bn, 64}):
            base = replace(p, bn=bn, split_tail=True, persistent=True, group_m=8, serpentine=True) if bn != p.bn else p
            if not base.split_tail:
                base = replace(base, split_tail=True, persistent=True, serpentine=True)
            for least in (2, 4, 8):
                add(f"bn{bn} min{least}", replace(base, split_min=least))
    time_variants(cases, Path(sys.argv[1]) if len(sys.argv) > 1 else None)


if __name__ == "__main__":
    main()
