#!/bin/sh
# Session 12, device call 1 (H100): where the fused kernel's last 2% goes. A cycle-stamped timeline
# of every tile's phases (fused, its GEMM alone, and the fused kernel with its arithmetic left out),
# then the same probes timed in alternation with cuBLAS (set s12probe).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
timeout 200 python3 tile_timeline.py --size 4096 --rounds 20 --json $OUT/s12-timeline.json > $OUT/s12-timeline.md 2>&1
echo "timeline: exit $?"
timeout 240 python3 bench_paired.py --set s12probe --rounds 300 --graph --json $OUT/s12-probe.json > $OUT/s12-probe.md 2>&1
echo "paired: exit $?"
grep -v "^$" $OUT/s12-timeline.md | tail -22
sed -n '/^# Paired/,$p' $OUT/s12-probe.md | grep -v "^$" | grep -v "^|---"
