#!/bin/sh
# Session 12, device call 5 (H200): the final code (d_over_c, c_first_buffer with the first slice
# first) on set s12, timed in alternation with cuBLAS replayed from a CUDA graph; d_over_c's GPU tests.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
timeout 200 python3 bench_paired.py --set s12 --rounds 300 --graph --json $OUT/s12-final.json > $OUT/s12-final.md 2>&1
echo "paired: exit $?"
cd ..
timeout 300 python3 -m pytest -v -m gpu tests/test_gpu_wgmma.py -k "d_over_c" > $OUT/s12-final-gpu-tests.log 2>&1
echo "tests: exit $?"; grep -c PASSED $OUT/s12-final-gpu-tests.log; grep -E "FAILED|Error|Timeout" $OUT/s12-final-gpu-tests.log | head -5
sed -n '/^# Paired/,$p' $OUT/s12-final.md | grep -v "^$" | grep -v "^|---"
