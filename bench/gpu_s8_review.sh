#!/bin/sh
# One device call (session 8, after the review): the GPU tests whose cases moved into ODD_C_CASES and
# _verify_launches (C through the ring, in boxes, stmatrix and prefetches, clusters of 4), then a short
# bench_paired run (its cuBLAS and eager launches now come from gemmtune.baseline) on tf32 and the fused case.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -k "c_ring or c_spread or stmatrix or clusters_of_four" -rs --maxfail=3 > $OUT/review-tests.log 2>&1
echo "GPU tests: exit $?"; grep -hE "^E  |^FAILED" $OUT/review-tests.log | head -6; tail -1 $OUT/review-tests.log
cd bench
timeout 150 python3 bench_paired.py --set s8 --only "4096x4096x4096 nt tf32" --rounds 30 > $OUT/paired-smoke.md 2>&1
echo "paired tf32: exit $?"
timeout 150 python3 bench_paired.py --set c4 --only "relu+add" --rounds 30 >> $OUT/paired-smoke.md 2>&1
echo "paired fused: exit $?"
sed -n '/^# Paired/,$p' $OUT/paired-smoke.md | tail -25
