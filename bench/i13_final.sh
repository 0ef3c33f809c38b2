#!/bin/bash
# Issue 13 (fp32, M = 1), device call 2 of 2: the chooser-pick GPU tests, then bench_untuned (fp32 and
# bf16, the 24 shapes) into the v2 table. Run from the repository root with $OUT set.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
set -o pipefail
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 90 python3 -m pytest -q -m gpu tests/test_gpu_gemv_splitk.py -k "chooser_picks or twice" 2>&1 | tee "$OUT/tests.log" | tail -3
timeout 370 python3 bench/bench_untuned.py --dtypes fp32,bf16 --out "$OUT/untuned-v2.md" --json "$OUT/untuned-v2.json" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"
grep -E "^\| (1x|4096x1x)|geomean|Copy" "$OUT/untuned-v2.md"
grep -E "nn fp32" "$OUT/untuned-v2.md" | awk -F'|' '{print $2, $7}'
