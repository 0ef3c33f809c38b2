#!/bin/sh
# One device call (session 7): the GPU tests that read C through the shared-memory epilogue, then the
# fused and bf16 variant sets in 3 interleaved rounds beside cuBLAS (bench/wgmma_variants.py).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -k "split_tail or c_spread or epilogues or pingpong" -rs --maxfail=3 > $OUT/gpu-tests.log 2>&1
echo "GPU tests: exit $?"; tail -1 $OUT/gpu-tests.log; grep -hE "^E  |^FAILED" $OUT/gpu-tests.log | head -6
timeout 150 python3 bench/wgmma_variants.py --set fused --rounds 3 --json $OUT/fused.json > $OUT/fused.md 2>&1
echo "fused: exit $?"
timeout 220 python3 bench/wgmma_variants.py --set bf16 --rounds 3 --json $OUT/bf16.json > $OUT/bf16.md 2>&1
echo "bf16: exit $?"
sed -n '/^# Summary/,$p' $OUT/fused.md $OUT/bf16.md
