#!/bin/bash
# Issue 13 (fp32, M = 1), device call 1 of 2: GPU tests of the split-K workspace, then diagnosis and
# training rows (bench/i13_probe.py), then a short table. Run from the repository root with $OUT set.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
set -o pipefail
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 110 python3 -m pytest -q -m gpu tests/test_gpu_gemv_splitk.py -k "workspace" 2>&1 | tee "$OUT/tests.log" | tail -4
timeout 345 python3 bench/i13_probe.py --out "$OUT" --budget 330 > "$OUT/probe.log" 2>&1
echo "probe rc=$?"; tail -3 "$OUT/probe.log"
python3 bench/i13_probe_summary.py "$OUT"
