#!/bin/sh
# One device call (session 7): the tensor-core ladder at 4096^3 against cuBLAS (bench/bench_tensor.py),
# bf16, fp16, tf32 and the fused fp16 relu+add, cuBLAS timed again after each case; tables under $OUT.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 400 python3 bench/bench_tensor.py --cases fp16:4096:relu+add bf16:4096 fp16:4096 tf32:4096 --min-time 0.2 \
  --skip pingpong --json $OUT/ladder-4096.json > $OUT/ladder-4096.md 2>&1
echo "4096 rc=$?"
grep -E "^\*\*|cuBLAS|eager|sliced|cluster|best|tma_store|persistent" $OUT/ladder-4096.md | cut -d'|' -f1,2,4,6,7 | cut -c1-150
