#!/bin/sh
# Session 11, device call 2 (at commit 2e102bc: the c_regs tests were removed with the option): the c_regs GPU tests (named), then the s11b set: where the fused
# kernel's C cost goes (L2 policies for A and B, C's L2 prefetch window, the wait between store
# slices), at 4096^3 fp16 relu+add, timed in alternation with cuBLAS replayed from a CUDA graph.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
timeout 200 python3 -m pytest -v -m gpu tests/test_gpu_wgmma.py -k "c_in_registers" > $OUT/s11b-gpu-tests.log 2>&1
echo "tests: exit $?"; grep -c PASSED $OUT/s11b-gpu-tests.log; grep -E "FAILED|Error" $OUT/s11b-gpu-tests.log | head -5
cd bench
timeout 300 python3 bench_paired.py --set s11b --rounds 300 --graph --json $OUT/s11b-4096.json > $OUT/s11b-4096.md 2>&1
echo "4096: exit $?"
sed -n '/^# Paired/,$p' $OUT/s11b-4096.md | grep -v "^$" | grep -v "^|---"
