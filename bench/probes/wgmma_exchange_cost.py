"""Probe: what does the split-tail exchange (partial sums through L2, flags, shares, the write of D)
cost on the long-K shapes still under 0.85x cuBLAS, and how much of it do the pieces writing their
shares of D themselves save?

    PYTHONPATH=src:bench python bench/probes/wgmma_exchange_cost.py [--out rows.md]

For each shape, the chooser's pick built four ways:
- finisher: the exchange as it was (schedule.SHARES_WRITE_D off): contributors sum shares and store
  them, a finisher waits, reads them back and writes D (verified: float64 reference, poisoned D);
- shares: every piece sums its share of the tile and writes it to D (SHARES_WRITE_D on; verified);
- shares, no wait: the shares build without its wait for the other pieces' flags (it reads whatever
  the partial slots hold: D wrong; what the reads and writes cost without the wait for the slowest);
- stores only: the finisher build with nobody summing (contributors store their partial tiles and
  raise their flags): D is wrong, only the time counts;
- no exchange: the finisher build with nothing stored or added (only the finisher's own K range
  reaches D): D wrong.
Each is launched alone after an L2 flush (a write pass over 256 MB) and a GPU spin that hides the
host's launch path, timed by CUDA events, median of --reps; cuBLAS the same way. finisher minus no
exchange is what the exchange cost before.
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

# The call sites the variants remove (text of the generated kernel; each must be found).
ADD = "add_partials(acc, worker, rank, consumer, unit);"
SHARE = "reduce_share(consumer);"
STORE = "store_partial(acc, consumer);"
# The shares build's wait for every piece's flag (sum_share_to_d): removed in "shares, no wait".
WAIT = "spin_until_equal(&partial_ready[((first + v) * CLUSTER_M + rank) * CONSUMERS + consumer], 1u);"


def variant(code: str, name: str) -> str:
    """The generated code with the exchange's calls removed as `name` says."""
    removed = {"full": (), "stores only": (ADD, SHARE), "no exchange": (ADD, SHARE, STORE),
               "shares, no wait": (WAIT,)}[name]
    for call in removed:
        if call not in code:
            if call == SHARE:  # the serial exchange (few pieces) has no shares
                continue
            raise SystemExit(f"the generated code has no '{call}': the probe is out of date")
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
    args = parser.parse_args()

    import torch

    from gemmtune.build import Kernel
    from gemmtune.chooser import choose
    from gemmtune.compiler import compile_kernel
    from gemmtune.device import query_device
    from gemmtune.evaluate import evaluate
    from gemmtune.kernels import get_family
    from gemmtune.kernels.wgmma import schedule
    from gemmtune.spec import GemmSpec

    shares_write_d = schedule.SHARES_WRITE_D

    info = query_device()
    arch = "sm_90a"
    family = get_family("wgmma")
    lines = [f"# The split-tail exchange's cost ({info.name})", "",
             "`bench/probes/wgmma_exchange_cost.py`: the chooser's pick with the exchange as it was (finisher), "
             "with every piece writing its share of D (shares), and with the exchange's calls removed (D then "
             f"wrong: time only); one launch after an L2 flush, CUDA events, median of {args.reps}.", "",
             "| shape | pick | cuBLAS µs | finisher µs | shares µs | shares, no wait µs | stores only µs | no exchange µs | exchange before µs (share) | verified (finisher, shares) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    for m, n, k, dtype in SHAPES:
        spec = GemmSpec(m, n, k, "nt", dtype)
        pick = choose(spec, arch).config
        a = torch.randn(m, k, device="cuda", dtype=dtypes[dtype])
        b = torch.randn(n, k, device="cuda", dtype=dtypes[dtype])  # nt: B stored N×K
        d = torch.empty(m, n, device="cuda", dtype=dtypes[dtype])
        cublas = time_launches(torch, lambda: torch.matmul(a, b.t(), out=d), args.reps)
        times, verified = {}, []
        for name in ("finisher", "shares", "shares, no wait", "stores only", "no exchange"):
            schedule.SHARES_WRITE_D = name.startswith("shares")
            try:
                source = family.render(spec, pick, arch)
            finally:
                schedule.SHARES_WRITE_D = shares_write_d
            if name == "shares, no wait" and WAIT not in source.code:
                continue  # no shares in this build (few pieces: the finisher adds them)
            code = source.code if name in ("finisher", "shares") else variant(source.code, name)
            compiled = compile_kernel(dataclasses.replace(source, code=code), arch)
            if name in ("finisher", "shares"):
                result = evaluate(compiled, verify_only=True)
                verified.append("ok" if result.ok else result.verify.message)
            kernel = Kernel(compiled, pick, "probe")
            kernel(a, b, out=d)  # load it before timing
            times[name] = time_launches(torch, lambda: kernel(a, b, out=d), args.reps)
        cost = times["finisher"] - times["no exchange"]
        no_wait = f"{times['shares, no wait'] * 1e6:.1f}" if "shares, no wait" in times else "-"
        row = (f"| {spec.short()} | {pick.describe()} | {cublas * 1e6:.1f} | {times['finisher'] * 1e6:.1f} "
               f"| {times['shares'] * 1e6:.1f} | {no_wait} | {times['stores only'] * 1e6:.1f} | {times['no exchange'] * 1e6:.1f} "
               f"| {cost * 1e6:.1f} ({cost / times['finisher']:.0%}) | {', '.join(verified)} |")
        print(row, flush=True)
        lines.append(row)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
