"""Probe: main-loop variants of the mma family's tuned kernel (forced bf16 4096³ nt), timed against cuBLAS.

    PYTHONPATH=src python bench/probes/mma_mainloop_variants.py [nt:4096 ...] [--compile] [--sass]

Variants are text edits of the rendered tuned kernel (128x256, 8 warps of 64x64, 64 B x 4 stages) or
other configs: `pred` issues the next slice's cp.async unconditionally (past K the copies are
zero-filled into a free slot), so ptxas may interleave the LDGSTS with the mma work; `spread` issues
A's copies at the first k-step and B's at the second; `after_mma` issues them after the first
k-step's mma; deeper slices (128 B), five stages, 256x128 tiles. Each kernel is verified and timed
twice (alternating), cuBLAS before and after; --compile only prints registers and spills; --sass
writes the cubins to /tmp/w4 for cuobjdump. Results: bench/results/2026-11-26-h200-mma-mainloop-variants.md.
"""
import dataclasses, os, re, sys, time
from gemmtune.spec import GemmSpec
from gemmtune.kernels.mma.config import MmaConfig
from gemmtune.kernels.mma.render import render
from gemmtune.compiler import compile_kernel

COND = "if (next < KTILES) issue_stage(RING_SLOT(next), next);"

def pred(code):
    assert code.count(COND) >= 1, "cond"
    return code.replace(COND, "issue_stage(RING_SLOT(next), next);  // past K: zero-filled copies into a free slot")

BLOCK = re.compile(r"if \(ks == 0\) \{\n\s*// Slice kt\+STAGES-1.*?\n\s*issue_stage\(RING_SLOT\(next\), next\);.*?\n\s*cp_async_commit\(\);\n\s*\}")

def spread(code):
    code = pred(code)
    old = BLOCK.search(code).group(0)
    new = """        if (ks == 0) load_a(slots + RING_SLOT(next) * SLOT_BYTES, A, m0, next * BK);
        if (ks == KSTEPS / 2) { load_b(slots + RING_SLOT(next) * SLOT_BYTES + A_TILE_BYTES, B, n0, next * BK); cp_async_commit(); }"""
    return code.replace(old, new)

def after_mma(code):
    """issue the copies after the first k-step's mma (ks == 0 block moved below multiply)."""
    code = pred(code)
    code = code.replace(BLOCK.search(code).group(0), "")
    old2 = "multiply(a[(ks + 0) & 1], b[(ks + 0) & 1]);"
    assert code.count(old2) == 1, code.count(old2)
    return code.replace(old2, old2 + " if (ks == 0) { issue_stage(RING_SLOT(next), next); cp_async_commit(); }")

BASE = MmaConfig()
VARIANTS = [
    ("tuned", BASE, lambda c: c),
    ("pred", BASE, pred),
    ("spread", BASE, spread),
    ("after_mma", BASE, after_mma),
    ("128B x4 pred", dataclasses.replace(BASE, k_bytes=128, stages=4), pred),
    ("128B x3 pred", dataclasses.replace(BASE, k_bytes=128, stages=3), pred),
    ("128B x4", dataclasses.replace(BASE, k_bytes=128, stages=4), lambda c: c),
    ("256x128 pred", dataclasses.replace(BASE, bm=256, bn=128), pred),
    ("64B x5 pred", dataclasses.replace(BASE, stages=5), pred),
]

if __name__ == "__main__":
    from gemmtune.bench import bench_compiled, bench_cublas
    from gemmtune.timing import TimingProtocol
    protocol = TimingProtocol(min_time_s=0.5)
    only_compile = "--compile" in sys.argv
    cases = [a for a in sys.argv[1:] if not a.startswith("--")] or ["nt:4096"]
    for case in cases:
        layout, size = case.split(":")
        spec = GemmSpec(int(size), int(size), int(size), layout=layout, dtype="bf16")
        kernels = []
        for name, cfg, f in VARIANTS:
            src = render(spec, cfg, "sm_90")
            try:
                k = compile_kernel(dataclasses.replace(src, code=f(src.code)), "sm_90")
            except AssertionError as e:
                print("skip", name, e); continue
            r = k.resources
            print(f"{name:16s} regs {r.registers} spill {r.spill_store_bytes}", flush=True)
            kernels.append((name, k))
            if "--sass" in sys.argv:
                os.makedirs("/tmp/w4", exist_ok=True); open(f"/tmp/w4/{name.replace(' ', '_')}.cubin", "wb").write(k.cubin)
        if only_compile:
            continue
        stamps = []
        def timed(f):
            t0 = time.time(); r = f(); stamps.append((t0, time.time())); return r
        rows = [("cuBLAS", timed(lambda: bench_cublas(spec, protocol)))]
        for rnd in range(2):
            for name, k in kernels:
                rows.append((f"{name} r{rnd}", timed(lambda: bench_compiled(name, "", k, protocol))))
        rows.append(("cuBLAS again", timed(lambda: bench_cublas(spec, protocol))))
        base = rows[0][1].median_s
        for name, r in rows:
            us = r.median_s * 1e6 if r.median_s else float("nan")
            tf = 2 * spec.m * spec.n * spec.k / r.median_s / 1e12 if r.median_s else 0
            print(f"{case} {name:22s} {us:9.1f} us  x{base / r.median_s if r.median_s else 0:.3f}  {tf:6.0f} TFLOP/s {r.status}", flush=True)
        with open(os.environ.get("OUT", "/tmp") + "/stamps.txt", "a") as fh:
            for (name, _), (t0, t1) in zip(rows, stamps):
                fh.write(f"{case}\t{name}\t{t0:.2f}\t{t1:.2f}\n")
