"""Probe: what does the split-tail exchange (partial sums through L2, flags, shares, the write of D)
cost on the long-K shapes still under 0.85x cuBLAS?

    PYTHONPATH=src:bench python bench/probes/wgmma_exchange_cost.py [--out rows.md]
        [--shapes 512x512x65536:bf16,...] [--variants "shares,stores only"] [--reps N]

For each shape, the chooser's pick built four ways from the same generated code:
- shares: as gemmtune builds it; where a tile is cut SCATTER_SPLITS ways or more, every piece sums its
  share of the tile over all the partial tiles and writes it to D (verified: float64 reference,
  poisoned D); with fewer pieces a finisher adds them one after another;
- shares, no wait: without the wait for the other pieces' flags (it reads whatever the partial slots
  hold: D wrong; what the reads and writes cost without the wait for the slowest);
- stores only: the pieces store their partial tiles and raise their flags, nobody sums them (D wrong);
- no exchange: nothing stored or summed (D wrong).
Each is launched alone after an L2 flush (a write pass over 256 MB) and a GPU spin that hides the
host's launch path, timed by CUDA events, median of --reps; cuBLAS the same way. shares minus no
exchange is what the exchange costs. (Until 2026-11-26 a "finisher" build timed the exchange before
the shares wrote D: `git show 751506f:bench/probes/wgmma_exchange_cost.py`.)
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = ((96, 96, 65536, "bf16"), (96, 96, 65536, "fp16"), (512, 512, 65536, "bf16"), (512, 512, 65536, "fp16"),
          (1024, 1024, 16384, "bf16"))

VARIANTS = ("shares", "shares, no wait", "stores only", "no exchange")

# The call sites the variants remove (text of the generated kernel; each must be found, but for the
# serial add and the shares, of which a build has one).
ADD = "add_partials(acc, worker, rank, consumer, unit);"
SHARE = "sum_share_to_d(consumer, tile_m, tile_n, D"
STORE = "store_partial(acc, consumer);"
# The shares' wait for every piece's flag (sum_share_to_d): removed in "shares, no wait".
WAIT = "spin_until_equal(&partial_ready[((first + v) * CLUSTER_M + rank) * CONSUMERS + consumer], 1u);"


def variant(code: str, name: str) -> str:
    """The generated code with the exchange's calls removed as `name` says."""
    removed = {"shares": (), "stores only": (ADD, SHARE), "no exchange": (ADD, SHARE, STORE),
               "shares, no wait": (WAIT,)}[name]
    for call in removed:
        if call not in code:
            if call in (ADD, SHARE):
                continue
            raise SystemExit(f"the generated code has no '{call}': the probe is out of date")
        if call == SHARE:  # the whole call statement: sum_share_to_d(consumer, tile_m, tile_n, D, ...);
            at = code.index(call)
            code = code[:at] + ";  // removed by the probe" + code[code.index(";", at) + 1:]
        else:
            code = code.replace(call, ";  // removed by the probe")
    return code


def time_launches(torch, launch, reps: int) -> float:
    """Median seconds of `launch()` alone after a 256 MB write pass (L2 emptied) and a spin of about
    0.25 ms, which keeps the GPU busy while the host prepares the launch (gemmtune's Python call
    path takes tens of µs: without the spin the events would time it too)."""
    flush = torch.empty(64 << 20, dtype=torch.float32, device="cuda")
    times = []
    for _ in range(reps + 3):
        flush.zero_()
        torch.cuda._sleep(500_000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times[3:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--shapes", help="MxNxK:dtype,... (default: the five above)")
    parser.add_argument("--variants", help="comma-separated subset of the five builds (default: all); under ncu one "
                                           "variant a process, so that its kernel's launches are the profiled ones")
    parser.add_argument("--alternatives", default="",
                        help="further builds beside the pick, 'name:field=value,...;...' (fields of WgmmaConfig, "
                             "changed from the pick: '128x128c2:bn=128,stages=6,cluster_m=2')")
    args = parser.parse_args()
    shapes = SHAPES if not args.shapes else tuple(
        (*map(int, shape.split(":")[0].split("x")), shape.split(":")[1]) for shape in args.shapes.split(","))
    wanted = VARIANTS if not args.variants else tuple(args.variants.split(","))

    import torch

    from gemmtune.chooser import choose
    from gemmtune.device import query_device
    from gemmtune.errors import ConfigError
    from gemmtune.spec import GemmSpec

    info = query_device()
    arch = "sm_90a"
    lines = [f"# The split-tail exchange's cost ({info.name})", "",
             "`bench/probes/wgmma_exchange_cost.py`: the chooser's pick as gemmtune builds it (shares) and with "
             "the exchange's calls removed (D then wrong: time only); one launch after an L2 flush, CUDA events, "
             f"median of {args.reps}.", "",
             "| shape | pick | cuBLAS µs | shares µs | shares, no wait µs | stores only µs | no exchange µs | exchange µs (share) | verified |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}
    for m, n, k, dtype in shapes:
        spec = GemmSpec(m, n, k, "nt", dtype)
        chosen = choose(spec, arch).config
        a = torch.randn(m, k, device="cuda", dtype=dtypes[dtype])
        b = torch.randn(n, k, device="cuda", dtype=dtypes[dtype])  # nt: B stored N×K
        d = torch.empty(m, n, device="cuda", dtype=dtypes[dtype])
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"  # fp32: cuBLAS SGEMM
        cublas = time_launches(torch, lambda: torch.matmul(a, b.t(), out=d), args.reps)
        for label, pick in configs(chosen, args.alternatives):
            try:
                lines.append(measure(torch, spec, pick, label, wanted, (a, b, d), cublas, args.reps))
            except ConfigError as error:
                print(f"| {spec.short()} | {label}: not valid ({error}) |", flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    return 0


def configs(chosen, alternatives: str) -> list:
    """The pick, then each alternative: ('name', the pick with the named fields changed)."""
    out = [("pick", chosen)]
    for item in filter(None, alternatives.split(";")):
        label, _, fields = item.partition(":")
        changes = {}
        for field in fields.split(","):
            key, _, value = field.partition("=")
            changes[key] = {"true": True, "false": False}.get(value.lower(), None)
            if changes[key] is None:
                changes[key] = int(value)
        out.append((label, chosen.with_(**changes)))
    return out


def measure(torch, spec, pick, label: str, wanted, operands, cublas: float, reps: int) -> str:
    """One table row: `pick` built as each wanted variant, timed (and the full build verified)."""
    from gemmtune.build import Kernel
    from gemmtune.compiler import compile_kernel
    from gemmtune.evaluate import evaluate
    from gemmtune.kernels import get_family
    from gemmtune.kernels.wgmma.schedule import schedule_for

    arch = "sm_90a"
    family = get_family("wgmma")
    a, b, d = operands
    times, verified = {}, []
    for name in wanted:
        source = family.render(spec, pick, arch)
        if name == "shares, no wait" and not schedule_for(spec, pick).scatter:
            continue  # no shares in this build (few pieces: the finisher adds them)
        code = variant(source.code, name)
        compiled = compile_kernel(dataclasses.replace(source, code=code), arch)
        if name == "shares":
            result = evaluate(compiled, verify_only=True)
            verified.append("ok" if result.ok else result.verify.message)
        kernel = Kernel(compiled, pick, "probe")
        kernel(a, b, out=d)  # load it before timing
        times[name] = time_launches(torch, lambda: kernel(a, b, out=d), reps)
    def us(name: str) -> str:
        return f"{times[name] * 1e6:.1f}" if name in times else "-"

    cost = (f"{(times['shares'] - times['no exchange']) * 1e6:.1f} "
            f"({(times['shares'] - times['no exchange']) / times['shares']:.0%})"
            if {"shares", "no exchange"} <= times.keys() else "-")
    row = (f"| {spec.short()} | {label}: {pick.describe()} ({schedule_for(spec, pick).workers * pick.cluster_m} blocks) "
           f"| {cublas * 1e6:.1f} | {us('shares')} "
           f"| {us('shares, no wait')} | {us('stores only')} | {us('no exchange')} | {cost} | {', '.join(verified)} |")
    print(row, flush=True)
    return row


if __name__ == "__main__":
    raise SystemExit(main())
