#!/bin/sh
# One device call: the GPU test of stream_timing, then bench_m1_stream (the M = 1 / N = 1 shapes in
# fp32 and bf16: one flushed launch beside back-to-back rotating timings of ours, cuBLAS and a copy).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 60 python3 -m pytest -q -s -m gpu tests/test_stream_timing.py > $OUT/m1-stream-tests.log 2>&1
echo "tests rc=$?"; grep -E "^single|passed|failed|Error" $OUT/m1-stream-tests.log | tail -5
timeout 170 python3 bench/bench_m1_stream.py --out $OUT/m1-stream.md --json $OUT/m1-stream.json \
  > $OUT/m1-stream.log 2>&1
echo "bench rc=$?"
if [ -f $OUT/m1-stream.md ]; then cat $OUT/m1-stream.md; else tail -20 $OUT/m1-stream.log; fi
