#!/bin/sh
# Session 10, device call 2 (call 1 hung on C through the ring in 4 slices with 4 stages: the ring
# deadlock that the stages constraint now rules out): the overlapped epilogue's GPU tests, then the
# s10 set's 4096^3 cases (8192^3 ran in call 1).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
timeout 240 python3 -m pytest -q tests/test_gpu_wgmma.py -m gpu -k "overlap" > $OUT/s10-gpu-tests.log 2>&1
echo "tests: exit $?"; tail -4 $OUT/s10-gpu-tests.log
cd bench
timeout 200 python3 bench_paired.py --set s10 --only 4096 --rounds 300 --graph --json $OUT/s10-4096.json > $OUT/s10-4096.md 2>&1
echo "4096: exit $?"
sed -n '/^# Paired/,$p' $OUT/s10-4096.md | grep -v "^$" | grep -v "^|---"
