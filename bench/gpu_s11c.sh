#!/bin/sh
# Session 11, device call 3: the s11c set (the fused kernel after the prefetch window and the
# compute-before-wait write-back) at 4096^3, then the GPU tests of the changed write-back paths.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
timeout 220 python3 bench_paired.py --set s11c --rounds 300 --graph --json $OUT/s11c-4096.json > $OUT/s11c-4096.md 2>&1
echo "4096: exit $?"
cd ..
timeout 250 python3 -m pytest -v -m gpu tests/test_gpu_wgmma.py -k "stmatrix_and_c_prefetch or c_in_registers" > $OUT/s11c-gpu-tests.log 2>&1
echo "tests: exit $?"; grep -c PASSED $OUT/s11c-gpu-tests.log; grep -E "FAILED|Error" $OUT/s11c-gpu-tests.log | head -5
sed -n '/^# Paired/,$p' $OUT/s11c-4096.md | grep -v "^$" | grep -v "^|---"
