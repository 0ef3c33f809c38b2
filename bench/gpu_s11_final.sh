#!/bin/sh
# Session 11, device calls 4 (H100) and 6 (H200): the final code (C's L2 prefetch over the 16 k-blocks before its loads;
# stmatrix slices computed before the wait for the store buffer) on the s10 set, whose configs are
# the bests of every bar, timed in alternation with cuBLAS replayed from a CUDA graph; then the GPU
# tests of the overlapped epilogue (stmatrix and C-through-the-ring cases among them).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
for size in 4096 8192; do
    rounds=$([ "$size" = 8192 ] && echo 150 || echo 300)
    timeout 190 python3 bench_paired.py --set s10 --only $size --rounds $rounds --graph --json $OUT/s11-final-$size.json > $OUT/s11-final-$size.md 2>&1
    echo "$size: exit $?"
done
cd ..
timeout 120 python3 -m pytest -v -m gpu tests/test_gpu_wgmma.py -k "overlap" > $OUT/s11-final-gpu-tests.log 2>&1
echo "tests: exit $?"; grep -c PASSED $OUT/s11-final-gpu-tests.log; grep -E "FAILED|Error" $OUT/s11-final-gpu-tests.log | head -5
for size in 4096 8192; do sed -n '/^# Paired/,$p' $OUT/s11-final-$size.md | grep -v "^$" | grep -v "^|---"; done
