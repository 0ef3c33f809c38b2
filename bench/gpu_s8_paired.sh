#!/bin/sh
# One device call (session 8): every s8 case timed in alternation with cuBLAS (bench_paired.py):
# the 8192^3 cases first (where the power limit moves the clock), then the 4096^3 ones.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
cd bench
timeout 280 python3 bench_paired.py --set s8 --only 8192 --rounds 300 --json $OUT/paired-8192.json > $OUT/paired-8192.md 2>&1
echo "paired 8192: exit $?"
timeout 250 python3 bench_paired.py --set s8 --only 4096 --rounds 400 --json $OUT/paired-4096.json > $OUT/paired-4096.md 2>&1
echo "paired 4096: exit $?"
tail -4 $OUT/paired-8192.md | head -1
sed -n '/^# Paired/,$p' $OUT/paired-8192.md $OUT/paired-4096.md
