#!/usr/bin/env bash
# The kernel_tuner peer on one GPU (issue 34): gemmtune's tuner and kernel_tuner 1.5.0 on the same
# simt space, 4 shapes, T seconds each per tuner, then one clock for both bests. Run from the repo
# root with .whl-kt carried; results under $OUT, a short table printed last. Bounded: every step
# runs under `timeout`, and a shape is skipped when too little of the ~8 minute budget is left.
set -u
T=${PEER_T:-30}                       # seconds per tuner per shape, counted from each tuner's launch
BUDGET=${PEER_BUDGET:-500}            # seconds for the whole script (the device allows 600 a command)
SHAPES=${PEER_SHAPES:-"1024 2048 4096 3000x5000x1504"}
OUT=${OUT:-/tmp/peer-out}
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
rm -rf /tmp/ktsite

timeout 120 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ktsite \
    .whl-kt/*.whl > "$OUT/pip.log" 2>&1 || { echo "wheel install failed:"; tail -5 "$OUT/pip.log"; }
# referencing needs typing_extensions (torch brings it); install ours only where there is none
python3 -c "import typing_extensions" 2>/dev/null || timeout 60 python3 -m pip install -q --no-index --no-deps \
    --no-compile --no-cache-dir --target /tmp/ktsite .whl-kt/fallback/*.whl >> "$OUT/pip.log" 2>&1
export PYTHONPATH=/tmp/ktsite:$PWD/src
timeout 60 python3 -c "import kernel_tuner, constraint, jsonschema, xmltodict, numpy, scipy, sklearn, pandas; \
print('kernel_tuner', kernel_tuner.__version__, 'numpy', numpy.__version__)" 2>&1 | tail -3
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -2

# Which kernel_tuner backend runs here: one config through run_kernel, judged by gemmtune's verify.
BACKEND=""
for b in NVCUDA CUPY; do
    if timeout 90 python3 bench/peers/kernel_tuner_peer.py --worker probe 512 --backend $b > "$OUT/probe-$b.log" 2>&1; then
        BACKEND=$b; tail -1 "$OUT/probe-$b.log"; break
    fi
    echo "backend $b failed:"; tail -4 "$OUT/probe-$b.log"
done
if [ -z "$BACKEND" ]; then echo "no kernel_tuner backend works; stopping"; exit 1; fi

i=0
for shape in $SHAPES; do
    left=$(( BUDGET - $(elapsed) ))
    need=$(( 2 * T + 70 ))
    if [ $left -lt $need ]; then echo "skipping $shape: ${left}s left, a shape needs ~${need}s"; i=$((i+1)); continue; fi
    timeout $(( left - 5 )) python3 bench/peers/kernel_tuner_peer.py "$shape" --time "$T" --out "$OUT" \
        --backend "$BACKEND" --first-index $i --slack 30 --retime-timeout 60 > "$OUT/shape-$i.log" 2>&1
    rc=$?
    echo "[$(elapsed)s] exit $rc for $shape: $(grep -E '^[0-9]+x' "$OUT/shape-$i.log" | tail -1)"
    i=$((i+1))
done

timeout 60 python3 bench/peers/kernel_tuner_peer.py --summarize "$OUT" > "$OUT/summary.log" 2>&1
echo "[$(elapsed)s] done; files in $OUT"
cat "$OUT/table.md" 2>/dev/null || tail -20 "$OUT/summary.log"
