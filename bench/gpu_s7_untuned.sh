#!/bin/sh
# One device call: the chooser-pick GPU tests, then bench_untuned (fp32 and bf16, the 24 shapes,
# chooser picks) into a table (session 7 experiment: the chooser saw split tails where every tile is split; reverted, see bench/results/2026-11-23-h100-untuned-split-features.md) under $OUT.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 100 python3 -m pytest -q -m gpu tests/test_gpu_gemv_splitk.py -k "chooser or twice" 2>&1 | tail -2
timeout 400 python3 bench/bench_untuned.py --dtypes fp32,bf16 --out "$OUT/untuned-split-features.md" --json "$OUT/untuned-split-features.json" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; tail -3 "$OUT/bench.log"
grep -E "geomean|Copy|^\| (1x|4096x1x)" "$OUT/untuned-split-features.md"
grep -E "nt bf16" "$OUT/untuned-split-features.md" | awk -F'|' '{print $2, $7}'
