"""Probe: the wgmma options the tuner found at 4096³, given to the chooser's untuned picks.

    PYTHONPATH=src python bench/probes/wgmma_chooser_options.py [--dtypes bf16,tf32] [--shapes 3072x3072x3072,...]
        [--out probe.json] [--jobs 14]

The chooser ranks wgmma candidates by tile and launch geometry (its model cannot see the write-back
options), and its candidates carry none of the options that the tuned 4096³ configs in
data/known_configs.json share: the store in column slices (2, or 4 for a 4-byte D, which frees a ring
stage: tf32's 128x256 candidate otherwise holds 2 stages), stmatrix (16-bit D), serpentine K order,
the write-back under the last wgmma (overlap_epilogue) and 2-block clusters sharing B. For every
eval-set shape (bench_untuned --set eval) whose pick is a wgmma config, this times in one process:
- **pick**: the chooser's pick as it is;
- **slices**: the pick with the store in slices and the deepest ring that then fits;
- **tuned**: slices + stmatrix + serpentine + overlap_epilogue, each where the family accepts it;
- **tuned+c2**: tuned with cluster_m = 2 where accepted;
- **known 4096³**: the dtype's tuned H100 4096³ config from the shipped table with the
  tail split along K, where it is valid;
- cuBLAS (torch.mm), same protocol (bench_untuned's: L2 emptied by a read pass, median).
Every kernel is verified (float64 reference, poisoned D). All kernels are compiled first in a process
pool (the disk cache), so the GPU part is timing only. Prints a table; --out writes the rows as JSON.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from gemmtune.spec import GemmSpec  # noqa: E402

LABELS = ("pick", "slices", "tuned", "tuned+c2")  # cumulative: each adds to the one before
KNOWN = "known 4096³"  # the dtype's tuned H100 4096³ config (data/known_configs.json), where it is valid


@dataclass(frozen=True)
class Row:
    spec: str
    dtype: str
    label: str
    config: str
    config_json: str
    seconds: float | None
    cublas_s: float | None
    verified: str


def deepest(family, config, spec, arch):
    for stages in (6, 5, 4, 3, 2):
        if not family.rejections(config.with_(stages=stages), spec, arch):
            return config.with_(stages=stages)
    return None


def variants(spec: GemmSpec, pick, arch: str) -> list[tuple[str, object]]:
    """(label, config) for the pick and its option variants, each accepted by the family, distinct."""
    from gemmtune.kernels import get_family
    from gemmtune.kernels.wgmma.config import OUT_BYTES, out_dtype

    family = get_family("wgmma")
    found = [("pick", pick)]
    wide_d = OUT_BYTES.get(out_dtype(spec)) == 4
    sliced = pick
    if pick.tma_store and not spec.epilogue.reads_c:
        sliced = deepest(family, pick.with_(store_slices=4 if wide_d else 2), spec, arch) or pick
    found.append(("slices", sliced))
    tuned = sliced
    for option in ("stmatrix", "serpentine", "overlap_epilogue"):
        trial = tuned.with_(**{option: True})
        if not family.rejections(trial, spec, arch):
            tuned = trial
        else:
            deeper = deepest(family, trial, spec, arch)
            if deeper is not None and deeper.stages >= tuned.stages - 1:
                tuned = deeper
    found.append(("tuned", deepest(family, tuned, spec, arch) or tuned))
    c2 = tuned.with_(cluster_m=2)
    if not family.rejections(c2, spec, arch):
        found.append(("tuned+c2", c2))
    known = known_config(spec, arch)
    if known is not None and not family.rejections(known, spec, arch):
        found.append((KNOWN, known))
    out, seen = [], set()
    for label, config in found:
        if config not in seen:
            seen.add(config)
            out.append((label, config))
    return out


def known_config(spec: GemmSpec, arch: str):
    """The shipped H100 4096³ wgmma config for the spec's dtype (plain epilogue), or None."""
    from gemmtune.export.config_source import load_known_configs
    from gemmtune.kernels import get_family

    for row in load_known_configs():
        if (row.family == "wgmma" and row.gpu == "H100" and row.dtype == spec.dtype and row.epilogue == "none"
                and (row.m, row.n, row.k) == (4096, 4096, 4096)):
            tail = row.config.with_(split_tail=True)  # as the chooser's candidates: the last wave split along K
            return tail if not get_family("wgmma").rejections(tail, spec, arch) else row.config
    return None


def _compile(job: tuple[GemmSpec, str, str]) -> str:
    """Render and compile one config (fills the disk cache); '' or the error."""
    spec, config_json, arch = job
    import gemmtune
    from gemmtune.errors import GemmtuneError

    try:
        gemmtune.build(spec, config=config_json, arch=arch, family="wgmma")
        return ""
    except GemmtuneError as err:
        return str(err)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="bf16,tf32")
    parser.add_argument("--shapes", help="MxNxK,... (default: the eval set)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--jobs", type=int, default=14)
    args = parser.parse_args()

    from bench_untuned import EVAL_SHAPES, LAYOUT, cublas_unchecked, untuned_protocol

    import gemmtune
    from gemmtune.baseline import cublas_measurement
    from gemmtune.chooser import choose
    from gemmtune.device import query_device
    from gemmtune.errors import GemmtuneError, VerifyError
    from gemmtune.evaluate import evaluate
    from gemmtune.kernels import family_for

    info = query_device()
    arch = info.arch
    shapes = ([tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")] if args.shapes
              else list(EVAL_SHAPES))
    plan: list[tuple[GemmSpec, str, object]] = []
    for dtype in args.dtypes.split(","):
        for m, n, k in shapes:
            spec = GemmSpec(m, n, k, LAYOUT[dtype], dtype)
            try:
                if family_for(spec, arch).name != "wgmma":
                    continue
            except GemmtuneError:
                continue
            pick = choose(spec, arch, info.sm_count).config
            plan += [(spec, label, config) for label, config in variants(spec, pick, arch)]
    print(f"{len(plan)} kernels; compiling in {args.jobs} processes", flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        errors = list(pool.map(_compile, [(s, json.dumps(c.to_json()), arch) for s, _, c in plan]))
    print(f"compiled ({sum(1 for e in errors if e)} errors)", flush=True)

    protocol = untuned_protocol()
    rows: list[Row] = []
    cublas: dict[str, float] = {}
    for (spec, label, config), error in zip(plan, errors):
        key = spec.short()
        if key not in cublas:
            try:
                cublas[key] = cublas_measurement(spec, protocol).median_s
            except VerifyError:
                cublas[key] = cublas_unchecked(spec, protocol)
        seconds, verdict = None, error and f"error: {error}"
        if not error:
            try:
                kern = gemmtune.build(spec, config=config, arch=arch)
                result = evaluate(kern.compiled, protocol)
                seconds = result.measurement.median_s if result.ok else None
                verdict = "ok" if result.ok else f"WRONG: {result.verify.message}"
            except GemmtuneError as err:
                verdict = f"error: {err}"
        rows.append(Row(key, spec.dtype, label, config.describe(), json.dumps(config.to_json()), seconds,
                        cublas[key], verdict))
        r = rows[-1]
        print(f"{key} {label:9s} {r.config:70s} {seconds and seconds * 1e6 or 0:9.1f} µs "
              f"x{(r.cublas_s / seconds) if seconds else 0:.3f} {verdict}", flush=True)

    today = datetime.date.today().isoformat()
    print(f"\n# wgmma options on the chooser's picks ({info.name}, {today})\n")
    print("| dtype | variant | geomean × cuBLAS | shapes | lowest |")
    print("|---|---|---:|---:|---|")
    for dtype in args.dtypes.split(","):
        keys = list(dict.fromkeys(r.spec for r in rows if r.dtype == dtype))
        best = [max((r.cublas_s / r.seconds, r.spec) for r in rows if r.spec == key and r.seconds)
                for key in keys if any(r.seconds for r in rows if r.spec == key)]
        if best:
            g = math.exp(sum(math.log(x) for x, _ in best) / len(best))
            print(f"| {dtype} | best of all | {g:.3f} | {len(best)} | {min(best)[0]:.3f} ({min(best)[1]}) |")
        for label in LABELS:
            # each shape's best variant at or before this label (a variant absent for a shape = the one before)
            ratios = []
            for key in dict.fromkeys(r.spec for r in rows if r.dtype == dtype):
                mine = [r for r in rows if r.spec == key and r.seconds and r.label in LABELS
                        and LABELS.index(r.label) <= LABELS.index(label)]
                if mine:
                    last = max(mine, key=lambda r: LABELS.index(r.label))
                    ratios.append((last.cublas_s / last.seconds, key))
            if ratios:
                g = math.exp(sum(math.log(x) for x, _ in ratios) / len(ratios))
                low = min(ratios)
                print(f"| {dtype} | {label} | {g:.3f} | {len(ratios)} | {low[0]:.3f} ({low[1]}) |")
    if args.out:
        args.out.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
