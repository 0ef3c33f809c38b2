# run: PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/fp8_promoted_tiles.py
"""fp8 tensor/rowwise: promoted tiles side by side (which default is fastest at promote_every 4)."""
import sys
sys.path.insert(0, "bench/probes"); sys.path.insert(0, "bench")
import fp8_scaled
from gemmtune.grouped.config import GroupedConfig, default_config, rejections, _deepest


def configs(spec, quick):
    d = default_config(spec)
    shapes = [d, d.with_(promote_every=0), d.with_(promote_every=8),
              GroupedConfig(64, 128, consumers=2, pingpong=True, staged_store=True, promote_every=4),
              GroupedConfig(64, 256, consumers=2, pingpong=True, staged_store=True, promote_every=4),
              GroupedConfig(64, 128, consumers=2, pingpong=True, staged_store=True, promote_every=8),
              GroupedConfig(64, 128, consumers=1, promote_every=4)]
    out = []
    for c in (_deepest(s, spec) for s in shapes):
        if c not in out and not rejections(c, spec):
            out.append(c)
    return out


def main():
    import torch
    fp8_scaled.configs_timed = configs
    for m, n, k in ((4096, 4096, 4096), (4096, 14336, 4096), (4096, 4096, 14336)):
        for scaling in ("tensor", "rowwise"):
            rows, _, _ = fp8_scaled.plain(torch, m, n, k, scaling, 6, True)
            print("\n".join(rows), flush=True)


if __name__ == "__main__":
    main()
