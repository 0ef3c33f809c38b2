#!/bin/sh
# One device call (session 8): ncu on the fused relu+add kernel and the same GEMM alone (the s8
# configs), then the 8192^3 bf16 case of the s8 variant set in 5 interleaved rounds.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
RING='{"bm":128,"bn":256,"stages":4,"consumers":2,"specialized":true,"persistent":true,"group_m":8,"cluster_m":2,"tma_store":true,"store_slices":2,"pingpong":false,"split_tail":true,"c_spread":false,"c_ring":true,"c_l2_prefetch":true,"stmatrix":true}'
PLAIN='{"bm":128,"bn":256,"stages":4,"consumers":2,"specialized":true,"persistent":true,"group_m":8,"cluster_m":2,"tma_store":true,"store_slices":2,"pingpong":false,"split_tail":true,"c_spread":false,"c_ring":false,"c_l2_prefetch":false,"stmatrix":true}'
timeout 120 python3 -m gemmtune.cli profile MNK=4096 --layout nt --dtype fp16 --epilogue relu+add --family wgmma --config "$RING" --raw $OUT/ncu-fused.csv > $OUT/profile-fused.txt 2>&1
echo "profile fused: exit $?"
timeout 120 python3 -m gemmtune.cli profile MNK=4096 --layout nt --dtype fp16 --family wgmma --config "$PLAIN" --raw $OUT/ncu-plain.csv > $OUT/profile-plain.txt 2>&1
echo "profile plain: exit $?"
paste $OUT/profile-fused.txt $OUT/profile-plain.txt | cut -c1-150 | head -40
timeout 300 python3 bench/wgmma_variants.py --set s8 --only 8192 --rounds 5 --json $OUT/s8-8192.json > $OUT/s8-8192.md 2>&1
echo "s8 8192: exit $?"
sed -n '/^# Summary/,$p' $OUT/s8-8192.md
