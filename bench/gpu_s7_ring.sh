#!/bin/sh
# One device call (session 7): the c_ring GPU tests, the fused variant set (C through the ring against
# the C tile buffer and the GEMM alone) in 3 interleaved rounds (the M = 1 stream bench runs in bench/gpu_m1_stream.sh).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -k "c_ring" -rs --maxfail=3 > $OUT/ring-tests.log 2>&1
echo "c_ring GPU tests: exit $?"; tail -1 $OUT/ring-tests.log; grep -hE "^E  |^FAILED" $OUT/ring-tests.log | head -6
timeout 150 python3 bench/wgmma_variants.py --set fused --rounds 3 --json $OUT/fused.json > $OUT/fused.md 2>&1
echo "fused: exit $?"
sed -n '/^# Summary/,$p' $OUT/fused.md
