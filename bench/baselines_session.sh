#!/usr/bin/env bash
# One GPU session for issue 15: gemmtune bench with every baseline for fp32 4096³, bf16 4096³ and fused
# fp16 4096³ (relu then +C), then the baselines' GPU tests. Writes JSON, CSV, logs and the markdown
# table under $OUT (default ./baselines-out). Run from the repository root:
#   OUT=/tmp/out bash bench/baselines_session.sh
# Expects the nvidia-cutlass wheel importable (PYTHONPATH) and nvcc on PATH; prebuilt CUTLASS
# libraries are reused from $XDG_CACHE_HOME/gemmtune/cutlass when nvcc's build matches.
set -u
OUT=${OUT:-baselines-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
run() {  # name, timeout, bench arguments
  local name=$1 limit=$2; shift 2
  echo "=== $name: gemmtune bench $* ($(date -u +%T))"
  timeout "$limit" python3 -m gemmtune.cli bench "$@" --steps best --json "$OUT/$name.json" --csv "$OUT/$name.csv" \
    2>&1 | tee "$OUT/$name.log"
}
run fp32 ${FP32_S:-150} MNK=4096 --dtype fp32
run bf16 ${BF16_S:-120} MNK=4096 --dtype bf16
run fp16-fused ${FUSED_S:-120} MNK=4096 --dtype fp16 --epilogue relu+add
python3 bench/baselines_table.py "$OUT"/fp32.json "$OUT"/bf16.json "$OUT"/fp16-fused.json > "$OUT/table.md"
echo "=== GPU tests ($(date -u +%T))"
timeout ${TESTS_S:-110} python3 -m pytest -q -x tests/test_gpu_baselines.py 2>&1 | tail -n 25 | tee "$OUT/tests.log"
cat "$OUT/table.md"
