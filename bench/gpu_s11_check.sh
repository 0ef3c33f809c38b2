#!/bin/sh
# Session 11, device call 5: the last code (C's L2 prefetches written from kb and kb_end alone, the
# same schedule as call 4's for tiles of 16 k-blocks or more): the GPU tests of the write-back paths
# it touches, then the fused case of the s10 set again.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
timeout 300 python3 -m pytest -v -m gpu tests/test_gpu_wgmma.py -k "stmatrix_and_c_prefetch or overlap or c_ring" > $OUT/s11-check-gpu-tests.log 2>&1
echo "tests: exit $?"; grep -c PASSED $OUT/s11-check-gpu-tests.log; grep -E "FAILED|Error" $OUT/s11-check-gpu-tests.log | head -5
cd bench
timeout 150 python3 bench_paired.py --set s10 --only relu --rounds 300 --graph --json $OUT/s11-check-fused.json > $OUT/s11-check-fused.md 2>&1
echo "fused: exit $?"
sed -n '/^# Paired/,$p' $OUT/s11-check-fused.md | grep -v "^$" | grep -v "^|---"
