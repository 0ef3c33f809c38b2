#!/bin/sh
# One device call: every wgmma GPU test (the kernel now walks pieces: whole tiles, or stream-K
# ranges of k-blocks; the stream-K tests are new), the log under $OUT, the summary printed last.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -k stream_k -rs --maxfail=3 > $OUT/streamk-gpu-tests.log 2>&1
echo "stream-K tests: pytest exit $?"; tail -3 $OUT/streamk-gpu-tests.log
timeout 420 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -k "not stream_k" -rs --maxfail=5 --durations=5 > $OUT/wgmma-gpu-tests.log 2>&1
echo "other wgmma tests: pytest exit $?"
grep -hE "^FAILED|^E  " $OUT/streamk-gpu-tests.log | head -12
grep -E "FAILED|Error|assert" $OUT/wgmma-gpu-tests.log | head -20
tail -15 $OUT/wgmma-gpu-tests.log
