#!/bin/sh
# One device call: the split-tail GPU tests, the split-tail variants beside cuBLAS
# (bench/wgmma_variants.py --final), then ncu on the fused kernel and the same config without its
# epilogue (what the C tile costs). Rows and logs under $OUT; the tables print last.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
timeout 170 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -k split_tail -rs --maxfail=3 > $OUT/split-gpu-tests.log 2>&1
echo "split-tail tests: exit $?"; tail -1 $OUT/split-gpu-tests.log; grep -hE "^E  " $OUT/split-gpu-tests.log | head -5
CFG='{"bm": 128, "bn": 256, "stages": 3, "consumers": 2, "specialized": true, "persistent": true, "group_m": 8, "cluster_m": 1, "tma_store": true, "store_slices": 1, "pingpong": false, "split_tail": false}'
for EPI in "--epilogue relu+add" ""; do
  timeout 90 python3 -m gemmtune.cli profile MNK=4096 --dtype fp16 --layout nt --family wgmma $EPI --config "$CFG" >> $OUT/profile-fused.txt 2>&1
done
timeout 300 python3 bench/wgmma_variants.py --final --json $OUT/variants.json > $OUT/variants.md 2>&1
grep -E "^4096|kernel:|duration|tensor pipe|DRAM|L2 hit|L2 thr|long_score|barrier|gemmtune:" $OUT/profile-fused.txt
cat $OUT/variants.md
