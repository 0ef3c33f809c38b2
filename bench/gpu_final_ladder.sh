#!/bin/sh
# One device call: the tensor-core ladder against cuBLAS (bench/bench_tensor.py), 4096^3 cases
# first, then 8192^3, each table printed as it is done and kept under $OUT.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 330 python3 bench/bench_tensor.py --cases bf16:4096 fp16:4096 tf32:4096 fp16:4096:relu+add --min-time 0.2 \
  --skip pingpong --json $OUT/ladder-4096.json > $OUT/ladder-4096.md 2>&1
echo "4096 rc=$?"
timeout 200 python3 bench/bench_tensor.py --cases bf16:8192 fp16:8192 --min-time 0.2 \
  --skip tma_wgmma multistage warp_specialized pingpong --json $OUT/ladder-8192.json > $OUT/ladder-8192.md 2>&1
echo "8192 rc=$?"
grep -E "^\*\*|cuBLAS|eager|sliced|cluster|best|tma_store|persistent" $OUT/ladder-4096.md $OUT/ladder-8192.md | cut -d'|' -f1,2,4,6,7 | cut -c1-150
