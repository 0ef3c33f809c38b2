"""Probe: the C path and schedule options of fused (C-reading) wgmma picks, side by side on long-K and
few-tile shapes, against the plain GEMM's pick on the same shape.

    PYTHONPATH=src:bench python bench/probes/wgmma_fused_paths.py [--out rows.json]

Variants of the chooser's fused pick: as picked; with serpentine K (the plain picks carry it, the fused
ones did not); C in 16-row boxes (c_spread) instead of through the ring; direct stores (no TMA store);
and the plain pick of the same shape without the epilogue (the bar: fusion must not cost more than C's
bytes). Shapes of public configs, not the model-shape suite's: Qwen-like 2048x3584x16384, OPT-like
2048x5120x13824, BERT-base-like 4096x768x3072, ViT-like 5000x768x3072, Whisper-like 1600x1280x5120.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = (((2048, 3584, 16384), "add"), ((2048, 5120, 13824), "bias_col+add"), ((4096, 768, 3072), "bias_col+add"),
          ((5000, 768, 3072), "bias_col+add"), ((1600, 1280, 5120), "bias_col+add"), ((4096, 3072, 768), "bias_col+gelu"))


def variants(spec):
    from gemmtune.build import choose_config
    from gemmtune.chooser.candidates import _deepest
    from gemmtune.kernels import get_family

    family = get_family("wgmma")
    pick = choose_config(spec, "sm_90a").config
    found = [("pick", pick), ("+serpentine", pick.with_(serpentine=True)),
             ("c_spread", pick.with_(c_ring=False, c_spread=True, d_over_c=False, c_first_buffer=False,
                                     c_l2_prefetch=False)),
             ("direct", pick.with_(tma_store=False, c_ring=False, c_spread=False, d_over_c=False, c_first_buffer=False,
                                   c_l2_prefetch=False, stmatrix=False, store_slices=1))]
    deepest = [(label, _deepest(c, spec)) for label, c in found]  # the ring as deep as the variant's buffers allow
    return [(label, c) for label, c in deepest if not family.rejections(c, spec, "sm_90a")]


def cases():
    from gemmtune.build import choose_config
    from gemmtune.spec import GemmSpec

    found = []
    for (m, n, k), epilogue in SHAPES:
        spec = GemmSpec(m, n, k, "nt", "bf16", epilogue)
        found += [(spec, label, config) for label, config in variants(spec)]
        plain = GemmSpec(m, n, k, "nt", "bf16")
        found.append((plain, "plain pick", choose_config(plain, "sm_90a").config))
    return found


if __name__ == "__main__":
    from ab_timing import variants_main

    raise SystemExit(variants_main(__doc__.splitlines()[0], cases))
