#!/bin/bash
# Issue 34: tuning an unseen aligned shape for 60 s (bf16, nt, wgmma), each run from an empty database
# and an empty NVRTC cache; wall time of the whole command, trials/s and time to best from its summary.
#   bash bench/probes/tune_60s.sh   (on a GPU machine, from the repo root; OUT= a folder for the logs)
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 COLUMNS=160
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for run in "M=3000 N=5000 K=1504|" "M=1536 N=6144 K=1536|" "M=3000 N=5000 K=1504|--lookahead"; do
  shape=${run%|*}; extra=${run#*|}
  tag=$(echo $shape $extra | tr -d ' =MNK-')
  export XDG_CACHE_HOME=/tmp/cache-$tag
  start=$(date +%s.%N)
  timeout 200 python -m gemmtune.cli tune $shape --dtype bf16 --layout nt --time 60 $extra --db /tmp/t-$tag.db > $OUT/tune-$tag.txt 2>&1
  rc=$?; end=$(date +%s.%N)
  echo "== $shape $extra rc $rc wall $(python3 -c "print(round($end-$start,1))") s"
  grep -E "search:|cuBLAS|trials" $OUT/tune-$tag.txt | tail -6
  sed -n '/best configs/,$p' $OUT/tune-$tag.txt | head -14
done
