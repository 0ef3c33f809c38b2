#!/bin/sh
# One device call: ping-pong correctness on many-tile shapes, the short list of variants, the ladder.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
python3 bench/pingpong_debug.py 2>&1 | tee $OUT/pingpong-debug.log
if grep -q "pingpong.*\(WRONG\|Error\)" $OUT/pingpong-debug.log; then SKIP="--skip pingpong"; else SKIP=""; fi
timeout 150 python3 bench/wgmma_variants.py --final --json $OUT/variants4.json $SKIP > $OUT/variants4.md 2>&1
timeout 330 python3 bench/bench_tensor.py --json $OUT/tensor-ladder.json $SKIP > $OUT/tensor-ladder.md 2>&1
cat $OUT/variants4.md; grep -A16 "^\*\*" $OUT/tensor-ladder.md | cut -c1-150
