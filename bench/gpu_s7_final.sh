#!/bin/sh
# One device call (session 7, final tree): every wgmma GPU test, then the bf16 bars in 3 interleaved
# rounds beside cuBLAS (bench/wgmma_variants.py --set bf16). Logs under $OUT; summaries print last.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 420 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -rs --maxfail=5 > $OUT/wgmma-gpu-tests.log 2>&1
echo "wgmma GPU tests: exit $?"; grep -hE "^FAILED|^E  " $OUT/wgmma-gpu-tests.log | head -10; tail -1 $OUT/wgmma-gpu-tests.log
timeout 160 python3 bench/wgmma_variants.py --set bf16 --rounds 3 --json $OUT/bf16.json > $OUT/bf16.md 2>&1
echo "bf16: exit $?"
sed -n '/^# Summary/,$p' $OUT/bf16.md
