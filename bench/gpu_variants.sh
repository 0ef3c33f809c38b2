#!/bin/sh
# One device call: ping-pong variants (short list), then every wgmma GPU test.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
timeout 100 python3 bench/wgmma_variants.py --final --json $OUT/variants5.json > $OUT/variants5.md 2>&1
timeout 420 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -rs 2>&1 | tee $OUT/gpu-tests-final.log | tail -12
cat $OUT/variants5.md
