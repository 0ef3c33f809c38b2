#!/bin/sh
# Session 9, device call 3: is cuBLAS's slow, unsteady timing in some runs host-side launch time
# leaking into the timed interval? The same cases timed with no lead (the flush only) and with the
# GPU held back before each start event (--lead-us), with cuBLAS also replayed from a CUDA graph.
# Then the GPU tests of this session's changes.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
for lead in 0 500; do
  timeout 110 python3 bench_paired.py --set s9 --only "4096x4096x4096 nt bf16" --rounds 300 --graph --lead-us $lead \
    --json $OUT/lead$lead-4096.json > $OUT/lead$lead-4096.md 2>&1; echo "4096 lead $lead: exit $?"
  timeout 130 python3 bench_paired.py --set s9 --only "8192x8192x8192 nt bf16" --rounds 200 --graph --lead-us $lead \
    --json $OUT/lead$lead-8192.json > $OUT/lead$lead-8192.md 2>&1; echo "8192 lead $lead: exit $?"
done
cd ..
timeout 150 python3 -m pytest -q tests/test_timing.py tests/test_co_residency.py tests/test_gpu_wgmma.py -k "lead or co_resid or serpentine or split_tail" > $OUT/tests.log 2>&1
echo "tests: exit $?"; tail -3 $OUT/tests.log
for f in $OUT/lead*.md; do sed -n '/^## /,$p' $f | grep -v "^$" | grep -v "^|---"; done
