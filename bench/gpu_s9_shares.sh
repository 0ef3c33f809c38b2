#!/bin/sh
# Session 9, device call 1: the split tail's even shares and serpentine K checked on odd shapes,
# then 8192^3 timed in alternation with cuBLAS: 64 pairs (session 8), 66 pairs, + split tail shares,
# + serpentine.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
timeout 170 python3 -m pytest -q -x tests/test_gpu_wgmma.py -k "serpentine or split_tail_on_odd" tests/test_co_residency.py > $OUT/tests.log 2>&1
echo "tests: exit $?"; tail -3 $OUT/tests.log
cd bench
timeout 400 python3 bench_paired.py --set s9 --only 8192 --rounds 300 --json $OUT/paired-8192.json > $OUT/paired-8192.md 2>&1
echo "paired 8192: exit $?"
sed -n '/^# Paired/,$p' $OUT/paired-8192.md
