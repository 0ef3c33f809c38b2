#!/bin/sh
# One device call: ping-pong correctness on many-tile shapes, then the short list of variants.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
python3 bench/pingpong_debug.py 2>&1 | tee $OUT/pingpong-debug.log
if grep -q "pingpong.*\(WRONG\|Error\)" $OUT/pingpong-debug.log; then SKIP="--skip pingpong"; else SKIP=""; fi
timeout 300 python3 bench/wgmma_variants.py --final --json $OUT/variants4.json $SKIP > $OUT/variants4.md 2>&1
cat $OUT/variants4.md
