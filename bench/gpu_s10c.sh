#!/bin/sh
# Session 10, device call 3: where the fused kernel's extra time goes (s10probe: timing probes that
# each remove one part of the C epilogue), and the 8192^3 bests again on a fresh machine (s10confirm).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
timeout 200 python3 bench_paired.py --set s10confirm --rounds 200 --graph --json $OUT/s10-confirm.json > $OUT/s10-confirm.md 2>&1
echo "confirm: exit $?"
timeout 150 python3 bench_paired.py --set s10probe --rounds 300 --graph --json $OUT/s10-probe.json > $OUT/s10-probe.md 2>&1
echo "probe: exit $?"
for f in $OUT/s10-confirm.md $OUT/s10-probe.md; do sed -n '/^# Paired/,$p' $f | grep -v "^$" | grep -v "^|---"; done
