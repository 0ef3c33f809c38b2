#!/bin/sh
# Session 13, last device call: the new known_configs entries and the chooser's C path end to end
# (gemmtune bench --steps best, verified and timed against cuBLAS and torch eager), and the
# d_over_c GPU tests.   sh bench/gpu_s13_check.sh
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
for args in "MNK=4096 --layout nt --dtype bf16" "MNK=4096 --layout nt --dtype fp16" "M=3072 N=4096 K=768 --layout nt --dtype fp16"; do
  timeout 100 python3 -m gemmtune.cli bench $args --epilogue relu+add --steps best --baselines cublas,eager > $OUT/bench.log 2>&1
  echo "bench $args: exit $?"; grep -v "^$" $OUT/bench.log | tail -6
done
timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -k d_over_c 2>&1 | tail -2
