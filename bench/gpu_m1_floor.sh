#!/bin/sh
# One device call: the M = 1 / N = 1 rows of bench_untuned under the current read flush (memset
# first), with the launch floor (an empty kernel timed the same way).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 bench/bench_untuned.py --shapes 1x4096x4096,4096x1x4096,1x11008x4096 \
  --out $OUT/m1.md > $OUT/m1.log 2>&1
echo "rc=$?"; grep -E "^\| 1x|^\| 4096x1|geomean|floor|Copy" $OUT/m1.md | cut -d'|' -f2,3,5,6,7,8,9
