#!/bin/sh
# One device call: the stream-K test fixed after the first run, the stream-K variants beside cuBLAS
# (bench/wgmma_variants.py --final), then ncu on the fused kernel and the same config without its
# epilogue (what the C tile costs). Rows and logs under $OUT; the variant table prints last.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
timeout 60 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -k stream_k_with_direct -rs > $OUT/streamk-test.log 2>&1
echo "stream-K direct/fp32-out test: exit $?"; tail -1 $OUT/streamk-test.log
timeout 400 python3 bench/wgmma_variants.py --final --json $OUT/variants.json > $OUT/variants.md 2>&1
CFG='{"bm": 128, "bn": 256, "stages": 3, "consumers": 2, "specialized": true, "persistent": true, "group_m": 8, "cluster_m": 1, "tma_store": true, "store_slices": 1, "pingpong": false, "stream_k": false}'
for EPI in "--epilogue relu+add" ""; do
  timeout 60 python3 -m gemmtune.cli profile MNK=4096 --dtype fp16 --layout nt --family wgmma $EPI --config "$CFG" >> $OUT/profile-fused.txt 2>&1
done
cat $OUT/profile-fused.txt | grep -E "duration|tensor pipe|DRAM|L2|stall|long_score|barrier|kernel:" 
cat $OUT/variants.md
