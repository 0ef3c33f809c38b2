#!/bin/sh
# Session 12, device call 4 (H100): d_over_c, and c_first_buffer writing the ring slices first (C's first slice in the room the store buffer left), after relu+add on
# the packed pair was removed: tile timeline, paired timing against cuBLAS (set s12), GPU tests of the changed paths.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
timeout 150 python3 tile_timeline.py --size 4096 --rounds 20 --json $OUT/s12-timeline4.json > $OUT/s12-timeline4.md 2>&1
echo "timeline: exit $?"
timeout 200 python3 bench_paired.py --set s12 --rounds 300 --graph --json $OUT/s12c.json > $OUT/s12c.md 2>&1
echo "paired: exit $?"
cd ..
timeout 330 python3 -m pytest -v -m gpu tests/test_gpu_wgmma.py -k "d_over_c" > $OUT/s12c-gpu-tests.log 2>&1
echo "tests: exit $?"; grep -c PASSED $OUT/s12c-gpu-tests.log; grep -E "FAILED|Error|Timeout" $OUT/s12c-gpu-tests.log | head -5
grep -v "^$" $OUT/s12-timeline4.md | tail -16
sed -n '/^# Paired/,$p' $OUT/s12c.md | grep -v "^$" | grep -v "^|---"
