#!/bin/sh
# Session 9, device call 2: the split-tail and serpentine GPU tests (odd shapes fixed for TMA rows),
# the 4096^3 cases of the s9 set (bf16, fp16, fused relu+add fp16, tf32), and 8192^3 bf16 again.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
timeout 200 python3 -m pytest -q tests/test_gpu_wgmma.py -k "serpentine or split_tail" tests/test_co_residency.py > $OUT/tests.log 2>&1
echo "tests: exit $?"; tail -3 $OUT/tests.log
cd bench
timeout 250 python3 bench_paired.py --set s9 --only 4096 --rounds 400 --json $OUT/paired-4096.json > $OUT/paired-4096.md 2>&1
echo "paired 4096: exit $?"
timeout 100 python3 bench_paired.py --set s9 --only "8192x8192x8192 nt bf16" --rounds 300 --json $OUT/paired-8192.json > $OUT/paired-8192.md 2>&1
echo "paired 8192: exit $?"
sed -n '/^# Paired/,$p' $OUT/paired-4096.md $OUT/paired-8192.md | grep -v "^$"
