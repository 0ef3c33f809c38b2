#!/bin/sh
# Session 13, device call 4 (H200): the final fused kernel and its GEMM alone (set s13b, for the
# known_configs entries), the C path on untuned fused shapes (set s13c), the back-to-back power
# probe, and the GPU tests call 3 had no time for (s13_rest.txt, made for the call and not kept:
# the 48 node ids after the 157th in collection order, one a line) plus the
# dtype tests.   sh bench/gpu_s13_h200.sh
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
set -f
timeout 150 python3 -m pytest -q -m gpu $(cat s13_rest.txt) tests/test_gpu_dtypes.py > $OUT/s13-4-gpu-tests.log 2>&1
echo "GPU tests: exit $?"; tail -1 $OUT/s13-4-gpu-tests.log; grep -E "FAILED|Error" $OUT/s13-4-gpu-tests.log | head -5
cd bench
timeout 100 python3 bench_paired.py --set s13b --rounds 300 --graph --json $OUT/s13-4-paired.json > $OUT/s13-4-paired.md 2>&1
echo "paired: exit $?"
timeout 150 python3 bench_paired.py --set s13c --rounds 200 --graph --json $OUT/s13-4-untuned.json > $OUT/s13-4-untuned.md 2>&1
echo "untuned: exit $?"
timeout 80 python3 power_probe.py --seconds 3 --reps 2 --json $OUT/s13-4-power.json > $OUT/s13-4-power.md 2>&1
echo "power: exit $?"
grep -v "^$" $OUT/s13-4-power.md | tail -8
for f in paired untuned; do sed -n '/^# Paired/,$p' $OUT/s13-4-$f.md | grep -v "^$" | grep -v "^|---"; done
