#!/bin/sh
# One device call for the whole session's GPU work: tests, then benchmarks. Logs and tables under $OUT.
# Usage: sh bench/gpu_session.sh "TEST FILES" "BENCH COMMANDS (; separated, run with sh -c)"
export PYTHONPATH=$PWD/src:$PYTHONPATH PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gemmtune-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [ -n "$1" ]; then python3 -m pytest -q -m gpu $1 -rs 2>&1 | tee "$OUT/gpu-tests.log" | tail -15; fi
if [ -n "$2" ]; then sh -c "$2" 2>&1 | tee "$OUT/bench.log" | grep -v "^  " | tail -60; fi
