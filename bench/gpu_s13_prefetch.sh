#!/bin/sh
# Session 13, device call 5 (H200): C's L2 prefetch, policy x grouping (set s13d), 400 rounds.
#   sh bench/gpu_s13_prefetch.sh
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
timeout 200 python3 bench_paired.py --set s13d --rounds 400 --graph --json $OUT/s13-5-paired.json > $OUT/s13-5-paired.md 2>&1
echo "paired: exit $?"
sed -n '/^# Paired/,$p' $OUT/s13-5-paired.md | grep -v "^$" | grep -v "^|---"
