#!/bin/sh
# Session 11, device call 1 (ran at commit 2e102bc; its set and the c_regs tests were removed with
# the option): the GPU tests of C read into registers (c_regs) and of the paths it
# shares (C through the ring, the overlapped epilogue), then the s11 set at 4096^3 (fused relu+add,
# fp16 and bf16) timed in alternation with cuBLAS replayed from a CUDA graph (the reference).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
timeout 300 python3 -m pytest -q tests/test_gpu_wgmma.py -m gpu -k "c_in_registers or overlap or c_ring" > $OUT/s11-gpu-tests.log 2>&1
echo "tests: exit $?"; tail -4 $OUT/s11-gpu-tests.log
cd bench
timeout 240 python3 bench_paired.py --set s11 --only 4096 --rounds 300 --graph --json $OUT/s11-4096.json > $OUT/s11-4096.md 2>&1
echo "4096: exit $?"
sed -n '/^# Paired/,$p' $OUT/s11-4096.md | grep -v "^$" | grep -v "^|---"
