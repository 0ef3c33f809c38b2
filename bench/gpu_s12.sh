#!/bin/sh
# Session 12, device calls 2-4 (H100): tile timeline, paired timing against cuBLAS (set s12), and the
# GPU tests of the changed paths. Call 2 (d_over_c, and relu+add on the packed pair, since removed):
#   sh bench/gpu_s12.sh 2 "d_over_c or stmatrix_and_c_prefetch or c_ring_on_odd"
# Calls 3 and 4 (c_first_buffer, first slice first / ring slice first):  sh bench/gpu_s12.sh 3  (4)
call=${1:-3}
tests=${2:-d_over_c}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
timeout 150 python3 tile_timeline.py --size 4096 --rounds 20 --json $OUT/s12-timeline-$call.json > $OUT/s12-timeline-$call.md 2>&1
echo "timeline: exit $?"
timeout 200 python3 bench_paired.py --set s12 --rounds 300 --graph --json $OUT/s12-$call.json > $OUT/s12-$call.md 2>&1
echo "paired: exit $?"
cd ..
timeout 330 python3 -m pytest -v -m gpu tests/test_gpu_wgmma.py -k "$tests" > $OUT/s12-$call-gpu-tests.log 2>&1
echo "tests: exit $?"; grep -c PASSED $OUT/s12-$call-gpu-tests.log; grep -E "FAILED|Error|Timeout" $OUT/s12-$call-gpu-tests.log | head -5
grep -v "^$" $OUT/s12-timeline-$call.md | tail -16
sed -n '/^# Paired/,$p' $OUT/s12-$call.md | grep -v "^$" | grep -v "^|---"
