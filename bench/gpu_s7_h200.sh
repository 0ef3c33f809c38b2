#!/bin/sh
# One device call on an H200 (session 7): the H100's best wgmma configs and their neighbours in
# 2 interleaved rounds beside cuBLAS (wgmma_variants.py --set h200), to pick the H200's known configs.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 420 python3 bench/wgmma_variants.py --set h200 --rounds 2 --json $OUT/h200.json > $OUT/h200.md 2>&1
echo "h200: exit $?"
sed -n '/^# Summary/,$p' $OUT/h200.md
