#!/bin/sh
# One device call (session 8): the stmatrix / c_l2_prefetch GPU tests and the c_ring ones, then the
# 4096^3 cases of the s8 variant set in 3 interleaved rounds (8192^3: bench/gpu_s8_8192.sh).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -k "stmatrix or c_ring" -rs --maxfail=3 > $OUT/s8-tests.log 2>&1
echo "stmatrix/prefetch/c_ring GPU tests: exit $?"; tail -1 $OUT/s8-tests.log; grep -hE "^E  |^FAILED" $OUT/s8-tests.log | head -6
timeout 330 python3 bench/wgmma_variants.py --set s8 --only 4096 --rounds 3 --json $OUT/s8-4096.json > $OUT/s8-4096.md 2>&1
echo "s8 4096: exit $?"
sed -n '/^# Summary/,$p' $OUT/s8-4096.md
