#!/bin/sh
# One device call: every wgmma GPU test on the final tree; the log under $OUT.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 540 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -rs --maxfail=5 > $OUT/wgmma-gpu-tests.log 2>&1
echo "exit $?"; grep -hE "^FAILED|^E  " $OUT/wgmma-gpu-tests.log | head -10; tail -2 $OUT/wgmma-gpu-tests.log
