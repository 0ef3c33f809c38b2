"""fp32 as 3xtf32 on both tensor-core families, side by side in the accuracy report: each kernel's error
against float64 beside cuBLAS SGEMM's on the same inputs (gemmtune.accuracy's input classes).

    PYTHONPATH=src python bench/probes/wgmma_3xtf32_accuracy.py --m 512 --n 384 --ks 4096,16384

Kernels: the mma family's 3xtf32 (a partial per k-step), the wgmma family's (a partial per 32-wide
k-block) with big = x as the tensor cores truncate it and with big rounded to nearest (round_big),
and simt (fp32 FMA). Prints one markdown table per K.
"""
from __future__ import annotations

import argparse
from datetime import date

import gemmtune
from gemmtune.accuracy import INPUT_CLASSES, format_report, run_report
from gemmtune.device import query_device
from gemmtune.kernels.wgmma.config import default_config
from gemmtune.spec import GemmSpec


def kernels(m: int, n: int, k: int) -> list[tuple[str, object]]:
    split = GemmSpec(m, n, k, "nt", "fp32", math="3xtf32")
    wgmma = default_config(split, "sm_90a")
    return [
        ("3xtf32 mma (partial per k-step)", gemmtune.build(split, arch=query_device().arch, family="mma")),
        ("3xtf32 wgmma (partial per k-block)", gemmtune.build(split, config=wgmma, arch="sm_90a", family="wgmma")),
        ("3xtf32 wgmma round_big", gemmtune.build(split, config=wgmma.with_(round_big=True), arch="sm_90a",
                                                  family="wgmma")),
        ("simt", gemmtune.build(GemmSpec(m, n, k, "nt", "fp32", math="simt"), arch=query_device().arch)),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m", type=int, default=512)
    parser.add_argument("--n", type=int, default=384)
    parser.add_argument("--ks", default="4096,16384")
    args = parser.parse_args()
    print(f"# {query_device().name}, {date.today()}: 3xtf32 accuracy, mma and wgmma\n")
    for k in (int(x) for x in args.ks.split(",")):
        spec = GemmSpec(args.m, args.n, k, "nt", "fp32", math="3xtf32")
        print(format_report(spec, run_report(spec, kernels(args.m, args.n, k), INPUT_CLASSES)) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
