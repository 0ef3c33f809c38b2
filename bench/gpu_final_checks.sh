#!/bin/sh
# One device call: the GPU tests that go through the default configs (now with split tails and C in
# boxes): dtypes through build(), export (the harness builds the TMA descriptors), tuning, runtime.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 420 python3 -m pytest -q -m gpu tests/test_gpu_dtypes.py tests/test_gpu_export.py tests/test_gpu_tune.py \
  tests/test_gpu_runtime.py -rs --maxfail=5 > $OUT/final-gpu-tests.log 2>&1
echo "exit $?"; grep -hE "^FAILED|^E  " $OUT/final-gpu-tests.log | head -10; tail -3 $OUT/final-gpu-tests.log
