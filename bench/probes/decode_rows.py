# run: PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/decode_rows.py OUT.json (from the repo root, on a GPU machine)
"""Decode rows 17-64: which wgmma variants stream B fastest (shapes outside the suite)."""
import sys
from dataclasses import replace
from pathlib import Path
sys.path.insert(0, "bench/probes")
from ab_timing import time_variants
from gemmtune.chooser import rank
from gemmtune.spec import GemmSpec
from gemmtune.epilogue import Epilogue

SHAPES = [(24, 3072, 3072, "none"), (40, 5120, 5120, "none"), (56, 16384, 3072, "none"), (24, 14336, 5120, "none"),
          (40, 5120, 14336, "none"), (56, 1024, 5120, "none"), (40, 5120, 5120, "add")]
OVERLAP = [(96, 5120, 2560, "none"), (128, 3072, 5120, "bias_col"), (200, 3072, 3072, "none"), (320, 2560, 5120, "bias_col"),
           (640, 5120, 3072, "none"), (1000, 6144, 2560, "bias_col"), (96, 6144, 5120, "bias_col"), (320, 3072, 2560, "none")]


def main():
    cases = []
    for m, n, k, epi in SHAPES:
        spec = GemmSpec(m, n, k, "nt", "bf16", epilogue=Epilogue.parse(epi)) if epi != "none" else GemmSpec(m, n, k, "nt", "bf16")
        p = rank(spec, "sm_90a", family="wgmma")[0].config
        seen = set()
        def add(label, c):
            if c not in seen:
                seen.add(c); cases.append((spec, label, c))
        add("pick", p)
        for st in (7, 8, 9, 11):
            add(f"st{st}", replace(p, stages=st))
        for cap in (2, 4, 8):
            add(f"cap{cap}", replace(p, split_cap=cap))
        for bn in (64, 128, 256):
            add(f"bn{bn}", replace(p, bn=bn, stages=8 if bn < 256 else 4))
        add("nosplit", replace(p, split_tail=False))
    for m, n, k, epi in OVERLAP:
        spec = GemmSpec(m, n, k, "nt", "bf16", epilogue=Epilogue.parse(epi)) if epi != "none" else GemmSpec(m, n, k, "nt", "bf16")
        p = rank(spec, "sm_90a", family="wgmma")[0].config
        cases.append((spec, "pick", p))
        cases.append((spec, "no-overlap", replace(p, overlap_epilogue=False)))
        cases.append((spec, "no-overlap+1", replace(p, overlap_epilogue=False, stages=p.stages + 1)))
    time_variants(cases, Path(sys.argv[1]) if len(sys.argv) > 1 else None)

if __name__ == "__main__":
    main()
