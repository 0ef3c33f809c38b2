#!/bin/sh
# Session 13, device call 3 (H100): set s13b timed back to back and with the GPU held 1 ms before each
# timed launch (a lower duty cycle: the card below its power limit), then the whole wgmma GPU suite.
#   sh bench/gpu_s13_lead.sh
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
timeout 100 python3 bench_paired.py --set s13b --rounds 300 --graph --json $OUT/s13-3-paired.json > $OUT/s13-3-paired.md 2>&1
echo "paired: exit $?"
timeout 100 python3 bench_paired.py --set s13b --rounds 300 --graph --lead-us 1000 --json $OUT/s13-3-lead.json > $OUT/s13-3-lead.md 2>&1
echo "paired, 1 ms lead: exit $?"
cd ..
timeout 380 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py > $OUT/s13-3-gpu-wgmma.log 2>&1
echo "wgmma GPU suite: exit $?"; tail -2 $OUT/s13-3-gpu-wgmma.log; grep -E "FAILED|Error" $OUT/s13-3-gpu-wgmma.log | head -5
for f in paired lead; do sed -n '/^# Paired/,$p' $OUT/s13-3-$f.md | grep -v "^$" | grep -v "^|---"; done
