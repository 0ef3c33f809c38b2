#!/bin/sh
# One device call: a wgmma simulation table (bench/record_space.py, bf16 4096^3 nt, the space in a
# fixed random order for 150 s), a 90 s evolutionary tuner run on wgmma bf16 2048^3 nt, and the
# fused ladder case again (its GEMM-alone row). Tables, databases and logs under $OUT.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
timeout 240 python3 bench/record_space.py --sizes 4096 --time 150 --family wgmma --dtype bf16 --layout nt \
  --out $OUT --db $OUT/record.sqlite > $OUT/record.log 2>&1
echo "record rc=$?"; tail -4 $OUT/record.log
timeout 150 python3 -m gemmtune.cli tune MNK=2048 --dtype bf16 --layout nt --family wgmma --time 90 \
  --strategy evolutionary --db $OUT/tune.sqlite > $OUT/tune.log 2>&1
echo "tune rc=$?"; tail -12 $OUT/tune.log
timeout 120 python3 bench/bench_tensor.py --cases fp16:4096:relu+add --min-time 0.2 \
  --skip tma_wgmma multistage warp_specialized wide_tile pingpong > $OUT/fused.md 2>&1
cat $OUT/fused.md
