#!/bin/sh
# One device call (session 8, final tree): every wgmma GPU test (odd shapes, all layouts and dtypes,
# the session's stmatrix / c_l2_prefetch / cluster-of-4 tests among them). Log under $OUT.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 570 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -rs --maxfail=5 > $OUT/wgmma-gpu-tests.log 2>&1
echo "wgmma GPU tests: exit $?"; grep -hE "^FAILED|^E  " $OUT/wgmma-gpu-tests.log | head -10; tail -1 $OUT/wgmma-gpu-tests.log
