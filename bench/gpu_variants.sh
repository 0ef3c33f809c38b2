#!/bin/sh
# One device call: every wgmma GPU test (the c_prefetch ones are new: C loaded into registers, not yet
# run on a GPU before this), then the short list of variants (fused C paths, L2 hints, ping-pong)
# beside cuBLAS. Logs and rows under $OUT; the variant table prints last.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
timeout 330 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -rs --maxfail=5 > $OUT/wgmma-gpu-tests.log 2>&1
tail -4 $OUT/wgmma-gpu-tests.log
if grep -q "c_prefetch.* FAILED\|FAILED.*c_prefetch" $OUT/wgmma-gpu-tests.log; then SKIP="--skip registers"; else SKIP=""; fi
timeout 240 python3 bench/wgmma_variants.py --final --json $OUT/variants.json $SKIP > $OUT/variants.md 2>&1
cat $OUT/variants.md
