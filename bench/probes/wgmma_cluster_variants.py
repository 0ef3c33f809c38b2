"""Probe: do clusters that multicast B (cluster_m=2, 4) lift the eval shapes still under 0.85x cuBLAS?

    PYTHONPATH=src:bench python bench/probes/wgmma_cluster_variants.py [--out rows.json]

The chooser's candidates have no clusters (its model was trained without them). Long-K shapes with
few tiles (512x512x65536: 128 blocks each reading a 256x128 tile's A and B over 4096 k, ~4.5 TB/s
out of L2 at 85 µs) may be bound by L2 reads, which a B shared by a pair of blocks cuts by a third
(128x256: 48 to 32 KB a k-block). For each shape: the pick, the pick and the other tiles with
cluster_m 2 (and 4 where bn allows), and a few tile variants without clusters; bench_untuned's protocol
(ab_timing.time_alternately: cuBLAS before and after, best of two runs, every kernel verified).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = (  # eval shapes under 0.85x, then shapes no eval row has (does a rule generalize?)
    (512, 512, 65536, "bf16"), (96, 96, 65536, "bf16"), (1536, 6144, 1536, "bf16"), (2048, 5120, 5120, "bf16"),
    (5000, 300, 2048, "tf32"), (512, 512, 65536, "tf32"),
    (768, 768, 32768, "bf16"), (1024, 1536, 16384, "bf16"), (2560, 7168, 2048, "bf16"), (4096, 4096, 4096, "bf16"),
)
TILES = ((128, 256), (256, 128), (128, 128), (64, 256), (64, 128), (128, 64), (128, 192))


def variants(spec, pick):
    """(label, config): the pick, every tile without and with clusters of 2 (4 for 256-wide tiles)."""
    from wgmma_space_variants import fitted

    out, chosen = [("pick", pick)], pick
    pick = pick.with_(cluster_m=1)  # the tiles' variants start without a cluster
    if not pick.persistent:  # clusters need the persistent kernel: its tiles from a persistent twin
        pick = pick.with_(persistent=True, group_m=8, split_tail=True)
        out.append(("persistent", pick))
    for bm, bn in TILES:
        tile = pick if (bm, bn) == (pick.bm, pick.bn) else fitted(pick.with_(bm=bm, bn=bn, consumers=1 if bm == 64 else 2), spec)
        if tile is None:
            continue
        if tile != chosen:
            out.append((f"{bm}x{bn}", tile))
        for cluster in (2, 4):
            if bn % (64 * cluster) == 0 and (cluster == 2 or bn == 256):
                out.append((f"{bm}x{bn} c{cluster}", tile.with_(cluster_m=cluster)))
    return out


def cases() -> list[tuple]:
    from gemmtune.chooser import choose
    from gemmtune.spec import GemmSpec

    found = []
    for m, n, k, dtype in SHAPES:
        spec = GemmSpec(m, n, k, "nt", dtype)
        found += [(spec, label, config) for label, config in variants(spec, choose(spec, "sm_90a").config)]
    return found


def main() -> int:
    from ab_timing import variants_main

    return variants_main(__doc__.splitlines()[0], cases)

if __name__ == "__main__":
    raise SystemExit(main())
