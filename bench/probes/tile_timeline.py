"""Where a wgmma kernel's time goes, tile by tile: the kernel's source patched to stamp the SM's cycle
counter (clock64) at the phases of every tile, for the fused kernel and its GEMM alone run in turn.

Each consumer's first thread writes, per tile: the piece's start, its first k-block landed, the main
loop's end (last wgmma done) and the write-back's end; and per store slice: C landed (fused only),
the slice computed into registers, the store buffer free, the slice's TMA store issued (with
d_over_c: the slice computed and written over C, the consumer's barrier passed, the store issued and
the previous slot handed back). The stamps
go to a __device__ array (one global store each, fire and forget); the host reads it back after each
launch. The kernels are verified unpatched first; the patched ones compute the same D (checked too).

Durations are in SM cycles, converted to µs at the clock measured in the same launch (cycles against
%globaltimer over each block's run). Tiles that are a block's first are left out of the per-tile
medians (their start includes the launch and the cold ring).

    PYTHONPATH=src python bench/probes/tile_timeline.py --size 4096 --rounds 20 [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, replace

import numpy as np

from gemmtune.baseline import prepare
from gemmtune.device import ensure_context, query_device
from gemmtune.evaluate import check_output, evaluate, upload_inputs
from gemmtune.kernel_source import KernelSource
from gemmtune.runtime import LoadedKernel, checked, driver, release
from gemmtune.spec import GemmSpec
from gemmtune.timing import L2Flush

from wgmma_variants import ALONE, S10_FUSED, Unverified, compile_variant, variant_spec

EVENTS = 16  # per tile and consumer: 4 tile phases, 4 per slice (2 slices), globaltimer, block, SM
MAIN = ("start", "first k-block landed", "main loop done", "write-back done")
SLICE = ("C landed", "slice computed", "store buffer free", "store issued")
GLOBALTIMER, BLOCK, SM = 12, 13, 14

STAMP_HELPERS = r"""
// tile_timeline.py: SM cycle stamps of each tile's phases, written by each consumer's first thread.
__device__ unsigned long long tl_stamps[TILES_M * TILES_N * CONSUMERS * 16];
__device__ __forceinline__ unsigned long long tl_clock() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) :: "memory");
    return t;
}
__device__ __forceinline__ void tl_mark(int tile_m, int tile_n, int consumer, int event) {
    if (threadIdx.x % 128 == 0 && tile_m < TILES_M && tile_n < TILES_N)
        tl_stamps[((tile_m * TILES_N + tile_n) * CONSUMERS + consumer) * 16 + event] = tl_clock();
}
__device__ __forceinline__ void tl_begin(int tile_m, int tile_n, int consumer) {
    if (threadIdx.x % 128 == 0 && tile_m < TILES_M && tile_n < TILES_N) {
        unsigned long long* at = tl_stamps + ((tile_m * TILES_N + tile_n) * CONSUMERS + consumer) * 16;
        unsigned long long g; unsigned int sm;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g) :: "memory");
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        at[0] = tl_clock(); at[12] = g; at[13] = blockIdx.x; at[14] = sm;
    }
}
"""


def _sub(code: str, old: str, new: str) -> str:
    if code.count(old) != 1:
        raise ValueError(f"timeline patch: {code.count(old)} matches for {old[:60]!r}")
    return code.replace(old, new)


def stamped(src: KernelSource) -> KernelSource:
    """`src` with the timeline stamps written in (cooperative stmatrix write-back, one piece a tile)."""
    code = _sub(src.code, "__device__ __forceinline__ void store_tile_smem(",
                STAMP_HELPERS + "__device__ __forceinline__ void store_tile_smem(")
    ev = lambda e: f"tl_mark(tile_m, tile_n, consumer, {e});"
    code = _sub(code, "            float acc[M_BLOCKS][BN / 2];\n",
                "            tl_begin(tile_m, tile_n, consumer);\n            float acc[M_BLOCKS][BN / 2];\n")
    code = _sub(code, "                mbarrier_wait(&full[s], phase);\n                wgmma_fence();\n",
                f"                mbarrier_wait(&full[s], phase);\n                if (kb == kb_begin) {ev(1)}\n"
                "                wgmma_fence();\n")
    code = _sub(code, "            wgmma_wait<0>();\n            release_stage(previous);\n",
                f"            wgmma_wait<0>();\n            {ev(2)}\n            release_stage(previous);\n")
    head = "            store_tile_smem(acc, tile_m, tile_n, consumer, out_buf, tma_D, "
    at = code.index(head)
    end = code.index(";\n", at) + 2
    code = code[:end] + f"            {ev(3)}\n" + code[end:]
    slice_ev = lambda e: f"tl_mark(tile_m, tile_n, consumer, 4 + 4 * slice + {e});"
    if "// this slice of C has landed in ring slot s" in code:
        code = _sub(code, "// this slice of C has landed in ring slot s\n",
                    f"// this slice of C has landed in ring slot s\n        {slice_ev(0)}\n")
    wait = ("        if (threadIdx.x % 128 == 0) tma_store_wait_read();  // the previous slice's store has read the buffer\n"
            "        named_barrier(1 + consumer, 128);\n")
    if wait in code:
        code = _sub(code, wait, f"        {slice_ev(1)}\n{wait}        {slice_ev(2)}\n")
    else:  # d_over_c: no buffer to wait for; "computed" then includes the stmatrix, "free" the barrier
        fence = ("        fence_async_shared();               // the TMA engine reads what these threads wrote\n"
                 "        named_barrier(1 + consumer, 128);   // every thread of this consumer has written its part\n")
        code = _sub(code, fence, f"        {slice_ev(1)}\n{fence}        {slice_ev(2)}\n")
    at = code.index("            tma_store_commit();\n        }\n", code.index("void store_tile_smem("))
    end = code.index("\n    }\n}\n", at)  # the end of the slice loop (after any slot release)
    code = code[:end] + f"\n        {slice_ev(3)}" + code[end:]
    return replace(src, code=code)


@dataclass(frozen=True)
class Variant:
    name: str
    spec: GemmSpec
    config: object
    patch: object = None


def read_stamps(kernel: LoadedKernel, count: int) -> np.ndarray:
    cu = driver()
    ptr, nbytes = checked(cu.cuModuleGetGlobal(kernel.module, b"tl_stamps"), "cuModuleGetGlobal")
    host = np.zeros(count, dtype=np.uint64)
    assert host.nbytes == nbytes, (host.nbytes, nbytes)
    checked(cu.cuMemcpyDtoH(host.ctypes.data, ptr, nbytes), "cuMemcpyDtoH")
    return host


def phases(stamps: np.ndarray, tiles: int, consumers: int) -> dict[str, list[float]]:
    """Per-tile phase lengths in µs (a block's first tile left out), plus the clock in GHz."""
    s = stamps.reshape(tiles, consumers, EVENTS).astype(np.int64)
    out: dict[str, list[float]] = {}
    # The clock: per block, cycles against globaltimer ns between its first and last tile's start.
    ghz = []
    for block in np.unique(s[:, 0, BLOCK]):
        rows = s[s[:, 0, BLOCK] == block][:, 0]
        rows = rows[np.argsort(rows[:, 0])]
        if len(rows) > 1 and rows[-1, GLOBALTIMER] > rows[0, GLOBALTIMER]:
            ghz.append((rows[-1, 0] - rows[0, 0]) / (rows[-1, GLOBALTIMER] - rows[0, GLOBALTIMER]))
    clock = statistics.median(ghz)
    out["clock GHz"] = [clock]
    first = {}
    for t in range(tiles):
        b = s[t, 0, BLOCK]
        if b not in first or s[t, 0, 0] < s[first[b], 0, 0]:
            first[b] = t
    keep = [t for t in range(tiles) if t not in set(first.values())]
    us = lambda cycles: float(cycles) / clock / 1e3
    for c in range(consumers):
        for t in keep:
            e = s[t, c]
            add = lambda k, v: out.setdefault(k, []).append(us(v))
            add("wait for first k-block", e[1] - e[0])
            add("main loop", e[2] - e[1])
            add("write-back", e[3] - e[2])
            prev = e[2]
            # in the order they ran (c_first_buffer writes the ring's slice first)
            for sl in sorted(range(2), key=lambda k: e[4 + 4 * k + 1]):
                ev = e[4 + 4 * sl: 8 + 4 * sl]
                if ev[0] > 0:
                    add(f"slice {sl}: wait for C", ev[0] - prev)
                    prev = ev[0]
                add(f"slice {sl}: compute", ev[1] - prev)
                add(f"slice {sl}: wait for store buffer", ev[2] - ev[1])
                add(f"slice {sl}: stmatrix + store", ev[3] - ev[2])
                prev = ev[3]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    ensure_context()
    dev = query_device()
    fused = GemmSpec(args.size, args.size, args.size, "nt", args.dtype, "relu+add")
    variants = [Variant("fused", fused, S10_FUSED),
                Variant(f"fused{ALONE}", variant_spec(fused, ALONE), S10_FUSED.without_c_options()),
                Variant("fused, D over C", fused, S10_FUSED.with_(d_over_c=True)),
                Variant("fused, D over C, C first buffer", fused, S10_FUSED.with_(d_over_c=True, c_first_buffer=True))]
    results = {}
    for v in variants:
        probe = isinstance(v.patch, Unverified)  # computes a wrong D on purpose: timed only
        if not probe:
            check = evaluate(compile_variant(v.spec, v.config, v.patch), verify_only=True, rng=np.random.default_rng(5))
            print(f"{v.name}: unpatched {'ok' if check.verify.ok else 'WRONG: ' + check.verify.message}", flush=True)
        compiled = compile_variant(v.spec, v.config, (lambda src, p=v.patch: stamped(p(src) if p else src)))
        print(f"{v.name}: stamped {compiled.resources.summary()}", flush=True)
        src = compiled.source
        tiles = -(-v.spec.m // v.config.bm) * -(-v.spec.n // v.config.bn)
        count = tiles * v.config.consumers * EVENTS
        prepared = prepare(v.spec)
        buffers, kernels = {}, []
        try:
            bindings = upload_inputs(v.spec, prepared.inputs, buffers)
            kernels.append(LoadedKernel(compiled))
            launch = kernels[0].bind(bindings)
            flush = L2Flush(dev.l2_bytes, "write")
            per_round = []
            for r in range(args.rounds + 2):
                flush()
                launch()
                checked(driver().cuCtxSynchronize(), "launch")
                if r >= 2:
                    per_round.append(phases(read_stamps(kernels[0], count), tiles, v.config.consumers))
            if not probe:
                ok = check_output(buffers["D"], v.spec, prepared.ref)
                print(f"{v.name}: stamped result {'ok' if ok.ok else 'WRONG: ' + ok.message}", flush=True)
            flush.close()
        finally:
            release([k.unload for k in kernels] + [b.free for b in buffers.values()], after_error=False)
        merged: dict[str, list[float]] = {}
        for p in per_round:
            for k, vals in p.items():
                merged.setdefault(k, []).extend(vals)
        results[v.name] = merged
    names = [v.name for v in variants]
    keys = list(dict.fromkeys(k for n in names for k in results[n]))
    lines = [f"# Tile timeline, {dev.name}, {fused.short()} and its GEMM alone ({args.rounds} launches each)",
             "", "| phase (µs, per tile and consumer; mean / median) | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    for k in keys:
        cells = []
        for n in names:
            vals = results[n].get(k)
            cells.append(f"{statistics.fmean(vals):.3f} / {statistics.median(vals):.3f}" if vals else "")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    print("\n".join(lines), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({n: {k: [round(x, 4) for x in v] for k, v in results[n].items()} for n in names}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
