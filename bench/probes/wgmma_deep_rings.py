"""Probe: do deeper TMA rings lift the small-tile wgmma kernels on the eval rows still under 0.85x?

    PYTHONPATH=src:bench python bench/probes/wgmma_deep_rings.py [--out rows.json]

Prediction under test: a block of a 64x64 or 128x64 tile streams its operands at about
(bytes in flight) / (load latency), and six 16-24 KB stages are too few to cover an HBM round trip,
so on shapes whose blocks are few or whose tiles are small (4096x128x4096, 96x96x65536) a ring 10-14
deep runs closer to the copy bandwidth. Each shape: the chooser's pick and its next three, then each
small tile with the ring 6, 8, 10, 12 deep and as deep as shared memory allows (MAX_STAGES). Timed as
the other probes (ab_timing: cuBLAS before and after, L2 emptied, every kernel verified).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = ((4096, 128, 4096, "bf16"), (96, 96, 65536, "bf16"), (512, 512, 65536, "bf16"),
          (1536, 6144, 1536, "bf16"), (5000, 300, 2048, "tf32"), (4096, 128, 4096, "fp16"))
TILES = ((64, 64), (128, 64), (64, 128), (128, 128))


def deepest(config, spec) -> int:
    """The most stages `config` fits (0: none)."""
    from gemmtune.kernels.wgmma import FAMILY
    from gemmtune.kernels.wgmma.config import MAX_STAGES

    fits = [s for s in range(2, MAX_STAGES + 1) if not FAMILY.rejections(config.with_(stages=s), spec, "sm_90a")]
    return fits[-1] if fits else 0


def variants(spec):
    """(label, config): the chooser's top four, then the small tiles at several ring depths."""
    from gemmtune.chooser import rank
    from gemmtune.kernels.wgmma.config import WgmmaConfig

    picks = [p.config for p in rank(spec, "sm_90a")[:4]]
    out = [("pick" if i == 0 else f"rank{i + 1}", c) for i, c in enumerate(picks)]
    for bm, bn in TILES:
        plain = WgmmaConfig(bm=bm, bn=bn, consumers=1 if bm == 64 else 2, stages=4, specialized=True,
                            persistent=True, group_m=8, split_tail=True, serpentine=True)
        most = deepest(plain, spec)
        for stages in sorted({s for s in (6, 8, 10, 12) if s <= most} | {most}):
            if stages:
                out.append((f"{bm}x{bn} s{stages}", plain.with_(stages=stages)))
    return out


def main() -> int:
    from ab_timing import nt_cases, variants_main

    return variants_main(__doc__.splitlines()[0], lambda: nt_cases(SHAPES, variants))


if __name__ == "__main__":
    raise SystemExit(main())
