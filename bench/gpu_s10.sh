#!/bin/sh
# Session 10, device calls 1 and 2: the overlapped epilogue's GPU tests, then the s10 set's cases of
# each size given (default 8192 4096) timed in alternation with cuBLAS through torch and replayed
# from a CUDA graph (the reference, --graph). Call 1 ran both sizes (its tests and its 4096 cases hung
# on the ring deadlock the stages constraint now rules out); call 2 ran `sh bench/gpu_s10.sh 4096`;
# call 4 ran both sizes again on the second version of the overlap (the last k-block's slot freed
# right after the lower half's write-back).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
timeout 240 python3 -m pytest -q tests/test_gpu_wgmma.py -m gpu -k "overlap" > $OUT/s10-gpu-tests.log 2>&1
echo "tests: exit $?"; tail -4 $OUT/s10-gpu-tests.log
cd bench
for size in ${@:-8192 4096}; do
    rounds=$([ "$size" = 8192 ] && echo 200 || echo 300)
    timeout 200 python3 bench_paired.py --set s10 --only $size --rounds $rounds --graph --json $OUT/s10-$size.json > $OUT/s10-$size.md 2>&1
    echo "$size: exit $?"
    sed -n '/^# Paired/,$p' $OUT/s10-$size.md | grep -v "^$" | grep -v "^|---"
done
