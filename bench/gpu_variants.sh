#!/bin/sh
# One device call: the C-in-registers epilogue (c_prefetch, not yet run on a GPU) checked on odd
# shapes, then the short list of variants (fused C paths, L2 hints, ping-pong) beside cuBLAS.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
timeout 240 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -k c_prefetch -rs 2>&1 | tee $OUT/c-prefetch-tests.log | tail -5
if grep -q "failed" $OUT/c-prefetch-tests.log; then SKIP="--skip registers"; else SKIP=""; fi
timeout 200 python3 bench/wgmma_variants.py --final --json $OUT/variants.json $SKIP > $OUT/variants.md 2>&1
cat $OUT/variants.md
