#!/bin/sh
# Session 10, device call 1: the overlapped epilogue's GPU tests, then the s10 set timed in alternation
# with cuBLAS through torch and replayed from a CUDA graph (the reference, --graph).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
timeout 200 python3 -m pytest -q tests/test_gpu_wgmma.py -m gpu -k "overlap or sliced_store_on_odd" > $OUT/s10-gpu-tests.log 2>&1
echo "tests: exit $?"; tail -4 $OUT/s10-gpu-tests.log
cd bench
timeout 170 python3 bench_paired.py --set s10 --only 8192 --rounds 200 --graph --json $OUT/s10-8192.json > $OUT/s10-8192.md 2>&1
echo "8192: exit $?"
timeout 170 python3 bench_paired.py --set s10 --only 4096 --rounds 300 --graph --json $OUT/s10-4096.json > $OUT/s10-4096.md 2>&1
echo "4096: exit $?"
for f in $OUT/s10-8192.md $OUT/s10-4096.md; do sed -n '/^# Paired/,$p' $f | grep -v "^$" | grep -v "^|---"; done
