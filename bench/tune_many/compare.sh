#!/usr/bin/env bash
# Issue 36's two-GPU bar in one call (nvidia-h100-x2, .whl carried): the same workload and
# --trials budget on both GPUs (4 workers) and on one (2 workers), each with its own database, then
# the wall-time ratio. Each run is gpu_run.sh (install, capture, tune-many, lock check).
#     export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
#     LOOKAHEAD=1 TRIALS=240 CALL_LIMIT=560 DEADLINE_TWO=230 bash bench/tune_many/compare.sh > $OUT/compare.log 2>&1
# (results: bench/results/2026-11-26-h200x2-tune-many-scaling.md)
set -u
TRIALS=${TRIALS:-80}
base=$OUT
START=$(date +%s)
mkdir -p "$base/two" "$base/one"
mkdir -p /tmp/tmc_two/xdg /tmp/tmc_one/xdg
# Each run starts from its own empty NVRTC cache: the second run would otherwise load the cubins
# the first compiled (same seeds, same configs) and pay a third of its compile time.
XDG_CACHE_HOME=/tmp/tmc_two/xdg OUT=$base/two WORK=/tmp/tmc_two TRIALS=$TRIALS WORKERS=4 TOP=1 BATCH=4 DEADLINE=${DEADLINE_TWO:-250} \
    bash bench/tune_many/gpu_run.sh > "$base/two/run.log" 2>&1
LEFT=$(( ${CALL_LIMIT:-565} - ($(date +%s) - START) ))
echo "two-GPU run took $(( $(date +%s) - START )) s; one-GPU run gets ${LEFT} s"
XDG_CACHE_HOME=/tmp/tmc_one/xdg OUT=$base/one WORK=/tmp/tmc_one TRIALS=$TRIALS WORKERS=2 TOP=1 BATCH=4 DEADLINE=$LEFT \
    CUDA_VISIBLE_DEVICES=0 bash bench/tune_many/gpu_run.sh > "$base/one/run.log" 2>&1
for run in two one; do
    echo "--- $run GPU(s)"; sed -n '/^=== .* summary/,$p' "$base/$run/run.log" | tail -12
done
python3 - "$base" <<'PY'
import re, sys, pathlib
walls = {}
for run in ("two", "one"):
    text = (pathlib.Path(sys.argv[1]) / run / "tune_many.txt").read_text(errors="replace")
    done = re.search(r"^(\d+) shapes, (\d+) trials, in ([\d.]+) s wall", text, re.M)
    stopped = re.search(r"stopped after ([\d.]+) s wall", text)
    walls[run] = (float(done.group(3)), True) if done else ((float(stopped.group(1)), False) if stopped else (None, False))
    print(f"{run}: {walls[run][0]} s wall, {'finished' if walls[run][1] else 'NOT finished'}")
(two, two_done), (one, one_done) = walls["two"], walls["one"]
if two and one and two_done:
    print(f"two GPUs / one GPU wall time: {two / one:.2f}" + ("" if one_done else " (one GPU unfinished: an upper bound)"))
PY
