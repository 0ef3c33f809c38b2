#!/bin/sh
# Session 9, device call 5: every wgmma GPU test on the final kernel code, the co-residency check and
# the timing lead.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 570 python3 -m pytest -q tests/test_gpu_wgmma.py tests/test_co_residency.py tests/test_timing.py -m gpu > $OUT/wgmma-gpu-tests.log 2>&1
echo "tests: exit $?"; tail -4 $OUT/wgmma-gpu-tests.log
