#!/bin/sh
# Session 13, device calls 7 on (H100, H200): rounds in a balanced order (timing.round_order: every
# variant after every other equally often). C's prefetch, policy x grouping (set s13d), session 12's
# steps (set s12), and (from call 8) the GEMM-alone bars (set s13e).
#   sh bench/gpu_s13_balanced.sh CALL [SETS]
call=${1:-8}
sets=${2:-"s13d s12 s13e"}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
for set in $sets; do
  rounds=300; [ "$set" = s13d ] && rounds=400
  timeout 200 python3 bench_paired.py --set $set --rounds $rounds --graph --json $OUT/s13-$call-$set.json > $OUT/s13-$call-$set.md 2>&1
  echo "$set: exit $?"
done
for set in $sets; do sed -n '/^# Paired/,$p' $OUT/s13-$call-$set.md | grep -v "^$" | grep -v "^|---"; done
