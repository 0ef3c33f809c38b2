"""Probe: the C path and schedule options of fused (C-reading) wgmma picks, side by side on long-K and
few-tile shapes, against the plain GEMM's pick on the same shape.

    PYTHONPATH=src:bench python bench/probes/wgmma_fused_paths.py [--out rows.json]

Variants of the chooser's fused pick: as picked; (run 1 only: with serpentine K, which the plain picks carry;
within 0.3%, so dropped); C in 16-row boxes (c_spread) instead of through the ring; direct stores (no TMA store);
ping-pong consumers on 64-row tiles (one's epilogue under the other's main loop); and the plain pick of the
same shape without the epilogue (the bar: fusion must not cost more than C's bytes). Shapes of public
configs, not the model-shape suite's (short K with GELU, bias or ReLU; C at large M and at decode batch).
Run 3 (this list): the C path with and without serpentine K on long-K and few-tile C shapes.
Run 2 (RUN_2_SHAPES) timed short K with GELU, bias or ReLU and C at a decode batch.
Run 1 (2026-11-29, ba545ac) timed long-K and C-path shapes: Qwen-like 2048x3584x16384 add, OPT-like
2048x5120x13824, BERT-base-like 4096x768x3072, ViT-like 5000x768x3072, Whisper-like 1600x1280x5120
(bias_col+add) and 4096x3072x768 bias_col+gelu.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = (((2048, 3584, 20480), "add"), ((4096, 1024, 3584), "bias_col+add"), ((1600, 1280, 6144), "bias_col+add"),
          ((3000, 1280, 4096), "add"))
EXTRA_VARIANTS = False  # runs 1 and 2: True (C in boxes, direct stores, ping-pong)
RUN_2_SHAPES = (((4096, 3072, 768), "bias_col+gelu"), ((1600, 5120, 1280), "bias_col+gelu"), ((5000, 2304, 768), "bias_col"),
                ((2048, 4096, 1024), "bias_col+relu"), ((4096, 768, 3072), "bias_col+add"), ((32, 4096, 5120), "add"))


def variants(spec):
    from gemmtune.build import choose_config
    from gemmtune.chooser.candidates import _deepest
    from gemmtune.kernels import get_family

    family = get_family("wgmma")
    pick = choose_config(spec, "sm_90a").config
    found = [("pick", pick), ("no serpentine", pick.with_(serpentine=False))]
    if not EXTRA_VARIANTS:  # run 3: serpentine alone
        return [(label, c) for label, c in found if not family.rejections(c, spec, "sm_90a")]
    found += [
             ("c_spread", pick.with_(c_ring=False, c_spread=True, d_over_c=False, c_first_buffer=False,
                                     c_l2_prefetch=False)),
             ("direct", pick.with_(tma_store=False, c_ring=False, c_spread=False, d_over_c=False, c_first_buffer=False,
                                   c_l2_prefetch=False, stmatrix=False, store_slices=1))]
    # Ping-pong consumers: each owns whole 64-row tiles, so one's epilogue runs under the other's main loop
    # (short K, costly epilogues); no split tail there.
    found += [(f"pingpong 64x{bn}", pick.with_(bm=64, bn=bn, pingpong=True, split_tail=False, overlap_epilogue=False,
                                                store_slices=1, c_ring=False, c_spread=spec.epilogue.reads_c,
                                                d_over_c=False, c_first_buffer=False, c_l2_prefetch=False))
              for bn in (128, 192, 256) if not spec.epilogue.reads_c]
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
