#!/bin/sh
# One device call (session 8, final tree): the chooser-pick, GEMV and split-K GPU tests and the export
# GPU tests (known_configs.json changed), the alternating timer's own use in bench_paired aside.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 500 python3 -m pytest -q -m gpu tests/test_gpu_gemv_splitk.py tests/test_gpu_export.py tests/test_stream_timing.py -rs --maxfail=5 > $OUT/other-gpu-tests.log 2>&1
echo "GPU tests: exit $?"; grep -hE "^FAILED|^E  |^SKIPPED" $OUT/other-gpu-tests.log | head -10; tail -1 $OUT/other-gpu-tests.log
