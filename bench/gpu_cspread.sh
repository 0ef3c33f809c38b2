#!/bin/sh
# One device call: the split-tail and c_spread GPU tests, then the C-spread variants beside cuBLAS
# (bench/wgmma_variants.py --final). Logs and rows under $OUT; the variant table prints last.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -k "split_tail or c_spread or epilogues or pingpong" -rs --maxfail=3 > $OUT/gpu-tests.log 2>&1
echo "GPU tests: exit $?"; tail -1 $OUT/gpu-tests.log; grep -hE "^E  |^FAILED" $OUT/gpu-tests.log | head -6
timeout 200 python3 bench/wgmma_variants.py --final --json $OUT/variants.json > $OUT/variants.md 2>&1
cat $OUT/variants.md
