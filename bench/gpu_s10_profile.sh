#!/bin/sh
# Session 10, device call 6 (H100): ncu through `gemmtune profile` on the best known 8192^3 bf16 kernel
# (overlapped epilogue) and the same without the overlap, and on the best fused 4096^3 kernel and the
# same GEMM alone: what limits each.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
S9='{"bm":128,"bn":256,"stages":4,"consumers":2,"specialized":true,"persistent":true,"group_m":8,"cluster_m":2,"tma_store":true,"store_slices":2,"pingpong":false,"split_tail":true,"stmatrix":true,"serpentine":true}'
ALONE='{"bm":128,"bn":256,"stages":4,"consumers":2,"specialized":true,"persistent":true,"group_m":8,"cluster_m":2,"tma_store":true,"store_slices":2,"pingpong":false,"stmatrix":true,"serpentine":true}'
run() { timeout 150 python3 -m gemmtune.cli profile "$@" 2>&1; echo; }
{
run MNK=8192 --layout nt --dtype bf16
run MNK=8192 --layout nt --dtype bf16 --config "$S9"
run MNK=4096 --layout nt --dtype fp16 --epilogue relu+add
run MNK=4096 --layout nt --dtype fp16 --config "$ALONE"
} > $OUT/profile-s10.txt
grep -E "^[0-9]|tensor pipe|DRAM bytes|duration|barrier|L2 hit|SM throughput" $OUT/profile-s10.txt
