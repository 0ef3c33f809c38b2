#!/bin/sh
# One device call (session 8): the cluster-of-4 GPU tests, then the c4 set timed in alternation with
# cuBLAS (bench_paired.py).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -k "clusters_of_four" -rs --maxfail=2 > $OUT/c4-tests.log 2>&1
echo "cluster-of-4 GPU tests: exit $?"; tail -1 $OUT/c4-tests.log; grep -hE "^E  |^FAILED" $OUT/c4-tests.log | head -6
cd bench
timeout 360 python3 bench_paired.py --set c4 --rounds 300 --json $OUT/paired-c4.json > $OUT/paired-c4.md 2>&1
echo "paired c4: exit $?"
grep "fit at once" $OUT/paired-c4.md
sed -n '/^# Paired/,$p' $OUT/paired-c4.md
