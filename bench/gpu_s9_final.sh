#!/bin/sh
# Session 9, device call 4: the s9final set timed in alternation with cuBLAS through torch, with
# cuBLAS also replayed from a CUDA graph as the reference (--graph), no lead (the dense duty cycle of
# back-to-back GEMMs).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
timeout 250 python3 bench_paired.py --set s9final --only 8192 --rounds 300 --graph --json $OUT/final-8192.json > $OUT/final-8192.md 2>&1
echo "8192: exit $?"
timeout 280 python3 bench_paired.py --set s9final --only 4096 --rounds 400 --graph --json $OUT/final-4096.json > $OUT/final-4096.md 2>&1
echo "4096: exit $?"
for f in $OUT/final-8192.md $OUT/final-4096.md; do sed -n '/^# Paired/,$p' $f | grep -v "^$" | grep -v "^|---"; done
