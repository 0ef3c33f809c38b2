#!/usr/bin/env bash
# Issue 14 in one GPU command: GPU tests, the numba/CUDA-C ladders at three sizes, ncu profiles of the
# best CUDA-C, best numba and cuBLAS (fp32 and TF32 tensor cores) kernels, a short real tuning run, plots.
# Usage: OUT=folder bash bench/numba_gpu_session.sh   (everything lands in $OUT/res, tarred to $OUT/res.tgz)
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=$OUT/res; mkdir -p "$R"
G="python -m gemmtune.cli"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv > "$R/gpu.txt" 2>&1
timeout 150 python -m pytest -q -m gpu tests/test_gpu_numba.py -x -p no:cacheprovider > "$R/test.log" 2>&1; echo "pytest rc=$?" >> "$R/test.log"
timeout 170 python bench/bench_numba.py --sizes 1024 2048 4096 --min-time 0.1 --out "$R" > "$R/bench.log" 2>&1; echo "bench rc=$?" >> "$R/bench.log"
BEST=$(python -c "import json;d=json.load(open('$R/ladder-4096.json'));ok=[p for p in d['pairs'] if p['numba']['median_s']];print(min(ok,key=lambda p:p['numba']['median_s'])['step'])" 2>/dev/null || echo double_buffer)
for t in "simt none" "numba $BEST" "cublas none" "cublas-tf32 none"; do
  set -- $t; cfg=(); [ "$2" != none ] && cfg=(--config "$2")
  echo "== profile --family $1 ${cfg[*]}" >> "$R/profile.txt"
  timeout 45 $G profile MNK=4096 --family "$1" "${cfg[@]}" --raw "$R/ncu-$1.csv" --json "$R/profile-$1.json" >> "$R/profile.txt" 2>&1; echo "rc=$?" >> "$R/profile.txt"
done
timeout 30 $G profile MNK=2048 --family numba --config "$BEST" --torch-profiler "$R/trace-numba.json" > "$R/torch-profiler.txt" 2>&1; echo "rc=$?" >> "$R/torch-profiler.txt"
timeout 50 $G tune MNK=2048 --time 35 --db "$R/tune.sqlite" --no-transfer > "$R/tune.log" 2>&1; echo "tune rc=$?" >> "$R/tune.log"
$G plot ladder "$R/ladder-4096.json" --out "$R/numba-ladder-4096" > "$R/plot.log" 2>&1
$G plot roofline "$R"/ladder-*.json --out "$R/roofline" >> "$R/plot.log" 2>&1
$G plot convergence --db "$R/tune.sqlite" --out "$R/convergence" >> "$R/plot.log" 2>&1
gzip -f "$R/trace-numba.json" 2>/dev/null
{ cat "$R/gpu.txt"; tail -4 "$R/test.log"; tail -3 "$R/tune.log"; cat "$R/plot.log"; grep -E "^==|rc=|kernel:|occupancy|SM thr|tensor|DRAM thr" "$R/profile.txt"; cat "$R/numba-ladder.md"; } > "$OUT/summary.txt" 2>&1
(cd "$OUT" && tar czf res.tgz res && rm -rf res)
cat "$OUT/summary.txt"
