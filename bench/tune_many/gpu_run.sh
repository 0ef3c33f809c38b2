#!/usr/bin/env bash
# Issue 36 on one GPU, in one command: capture a Llama-3-8B layer's GEMMs (q/k/v/o, gate/up/down at
# batch·sequence 1, 16, 128, 2048, 8192; bf16), tune them with `gemmtune tune-many --workers 2` (two
# Dask workers sharing the GPU under one time budget; cuBLAS measured first), and check from the GPU
# lock's log that no two timed sections overlapped. Run from the repository root, .whl/ (the Dask wheels) carried:
#
#     bash bench/tune_many/gpu_run.sh 2>&1 | tee $OUT/run.log
#
# $OUT receives 7 files (the device returns at most 8): run.log (from the tee above), tune.sqlite,
# llama8b_layer.json, tune_many.txt (progress, per-shape table, whole-model line, lock report),
# tune_many.err (stderr, the lock-wait notices counted, not listed), lock.log (every timed section:
# pid start end worker, CLOCK_MONOTONIC), lock_report.json. Scratch goes to $WORK.
# Knobs (environment): BUDGET (tune-many --time, default 90 s), DEADLINE (seconds from the start by
# which tune-many gets SIGINT: it then prints the shapes finished, default 300), BATCH (4), TOP (2),
# WORKERS (2), RESUME=1 (keep $WORK's database from an earlier run). DRY=1: no wheel install (dask must import already) and tune-many --simulate on
# synthetic tables, to check this script on a machine without a GPU.
set -u -o pipefail

T0=$(date +%s)
OUT=${OUT:-/tmp/tune_many_out}
WORK=${WORK:-/tmp/tune_many_work}
BUDGET=${BUDGET:-90}
DEADLINE=${DEADLINE:-300}
BATCH=${BATCH:-4}
TOP=${TOP:-2}
WORKERS=${WORKERS:-2}  # "auto": no --workers (tune-many's default: one per visible GPU)
TRIALS=${TRIALS:-}  # set: --trials TRIALS instead of --time BUDGET (the same work for a 1- and 2-GPU run)
DRY=${DRY:-0}
BATCH_SEQ="1 16 128 2048 8192"
[ "${RESUME:-0}" = 1 ] || rm -rf "$WORK"  # a warm machine keeps /tmp: start from an empty database
mkdir -p "$OUT" "$WORK/capture"
STATUS=()  # one "step: ok|FAILED ..." per step, printed at the end

elapsed() { echo $(( $(date +%s) - T0 )); }
step() { echo; echo "=== [$(elapsed) s] $*"; }
record() { STATUS+=("$1: $2"); echo "--- $1: $2"; }
gt() { python3 -m gemmtune.cli "$@"; }

# --- 1. Dask from the carried wheels -------------------------------------------------------------
step "1. install dask + distributed from .whl/"
if [ "$DRY" = 1 ]; then
    export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
    record install "skipped (DRY=1)"
else
    # dask and distributed always; each of their needs only where the machine lacks it or has one
    # older than they ask for (the image has click, cloudpickle, fsspec, jinja2, markupsafe, msgpack,
    # packaging, psutil, pyyaml, sortedcontainers, toolz; not partd, locket, tblib, zict, tornado).
    NEEDED=$(python3 - <<'EOF'
import importlib.metadata as md
minimum = {"click": "8.1", "cloudpickle": "3.0.0", "fsspec": "2021.9.0", "packaging": "20.0", "partd": "1.4.0",
           "pyyaml": "5.4.1", "toolz": "0.12.0", "jinja2": "2.10.3", "markupsafe": "2.0", "locket": "1.0.0",
           "msgpack": "1.0.2", "psutil": "5.8.0", "sortedcontainers": "2.0.5", "tblib": "1.6.0",
           "tornado": "6.2.0", "zict": "3.0.0"}
def tuple_of(text):
    return tuple(int("".join(c for c in part if c.isdigit()) or 0) for part in text.split(".")[:3])
for name, low in minimum.items():
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have is None or tuple_of(have) < tuple_of(low) or (name == "tblib" and have in ("3.2.0", "3.2.1")):
        print(name)
EOF
)
    WHEELS=()
    for wheel in .whl/*.whl; do
        name=$(basename "$wheel" | cut -d- -f1 | tr 'A-Z_' 'a-z-')
        case $name in dask|distributed) ;; *) echo "$NEEDED" | grep -qx "$name" || continue ;; esac
        WHEELS+=("$wheel")
    done
    echo "from .whl: ${WHEELS[*]##*/}"
    if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            "${WHEELS[@]}" > "$WORK/pip.txt" 2>&1; then
        record install "ok (${#WHEELS[@]} wheels: dask distributed ${NEEDED//$'\n'/ })"
    else
        tail -5 "$WORK/pip.txt"; record install "FAILED (pip; see above)"
    fi
    export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
fi
export GEMMTUNE_LOCK_DIR=$WORK/locks
python3 - <<'EOF'
import importlib.metadata as md
import sys
import dask, distributed, numpy, rich  # noqa: F401  (each must import)
print("python", sys.version.split()[0], *(f"{name} {md.version(name)}" for name in
      ("dask", "distributed", "numpy", "rich", "cloudpickle", "tornado", "msgpack", "psutil", "click", "jinja2")))
print("dask from", dask.__file__)
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.cuda.is_available())
except ImportError:
    print("torch missing")
from gemmtune.compiler import nvrtc_version
from gemmtune.device import present_device
print("nvrtc", nvrtc_version(), "device", present_device())
EOF
[ $? = 0 ] && record preflight ok || record preflight "FAILED (imports; see above)"
[ "$DRY" = 1 ] || nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm,power.draw,temperature.gpu --format=csv

# --- 2. the workload -----------------------------------------------------------------------------
step "2. capture the Llama-3-8B layer at batch·sequence $BATCH_SEQ (meta device) and merge"
pids=()
for n in $BATCH_SEQ; do
    gt shapes from-torch examples/llama_layer.py:make_model --input "${n}x4096:bf16" --device meta \
        --out "$WORK/capture/llama_$n.json" > "$WORK/capture/llama_$n.txt" 2>&1 &
    pids+=($!)
done
captured=0
for pid in "${pids[@]}"; do wait "$pid" && captured=$((captured + 1)); done
parts=()
for n in $BATCH_SEQ; do parts+=("$WORK/capture/llama_$n.json"); done
WORKLOAD=$OUT/llama8b_layer.json
if [ "$captured" = 5 ] && gt shapes merge "${parts[@]}" --out "$WORKLOAD" > "$WORK/workload.txt" 2>&1; then
    cat "$WORK/capture/llama_8192.txt" "$WORK/workload.txt"
    record capture "ok ($(grep -o '[0-9]* shapes written' "$WORK/workload.txt"))"
else
    cat "$WORK"/capture/*.txt "$WORK/workload.txt" 2>/dev/null | tail -20
    record capture "FAILED ($captured of 5 captured)"
fi

# --- 3. tune-many: two Dask workers on one GPU ----------------------------------------------------
SIM=()
if [ "$DRY" = 1 ]; then
    python3 bench/tune_many/synthetic_tables.py "$WORKLOAD" "$WORK/tables" > "$WORK/tables.txt" 2>&1 || tail -5 "$WORK/tables.txt"
    SIM=(--simulate "$WORK/tables")
fi
left=$(( DEADLINE - $(elapsed) ))
[ "$left" -ge 60 ] || left=60  # a slow start still leaves tune-many a minute
AMOUNT=(--time "$BUDGET"); [ -n "$TRIALS" ] && AMOUNT=(--trials "$TRIALS")
[ "${LOOKAHEAD:-0}" = 1 ] && AMOUNT+=(--lookahead)
WORKER_ARGS=(--workers "$WORKERS"); [ "$WORKERS" = auto ] && WORKER_ARGS=()
step "3. tune-many ${WORKER_ARGS[*]} ${AMOUNT[*]} --batch $BATCH --top $TOP, CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-all} (SIGINT if still running in ${left} s)"
timeout -s INT -k 20 "$left" python3 -m gemmtune.cli tune-many "$WORKLOAD" "${WORKER_ARGS[@]}" "${AMOUNT[@]}" \
    --batch "$BATCH" --top "$TOP" --db "$WORK/tune.sqlite" --lock-log "$OUT/lock.log" --task-log "$OUT/tasks.jsonl" "${SIM[@]}" \
    > "$OUT/tune_many.txt" 2> "$WORK/tune_many.err"
rc=$?
cat "$OUT/tune_many.txt"
waits=$(grep -c "waiting for the GPU lock" "$WORK/tune_many.err")
{ echo "(lines 'waiting for the GPU lock' left out: $waits)"; grep -v "waiting for the GPU lock" "$WORK/tune_many.err"; } \
    > "$OUT/tune_many.err"
grep -v "^(lines\|^\s*$" "$OUT/tune_many.err" | tail -15
case $rc in
    0) record tune-many "ok" ;;
    1) if grep -q "^Traceback" "$WORK/tune_many.err"; then record tune-many "FAILED (a traceback: see tune_many.err)"
       else record tune-many "exit 1 (a shape not tuned, or overlapping timed sections: see above)"; fi ;;
    124|130) record tune-many "STOPPED at the deadline (exit $rc): the table above has the shapes finished" ;;
    *) record tune-many "FAILED (exit $rc; see tune_many.err)" ;;
esac
[ "$DRY" = 1 ] || nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm,power.draw,temperature.gpu --format=csv

# --- 4. measured: did timed sections overlap? --------------------------------------------------------
step "4. GPU lock log: overlapping timed sections and busy time per worker"
python3 - "$OUT/lock.log" "$OUT/lock_report.json" <<'EOF'
import json, sys
from gemmtune.gpu_lock import lock_report, overlaps, read_intervals
intervals = read_intervals(sys.argv[1])
report = lock_report(intervals)
print("\n".join(report.lines()))
data = report.to_json()
data["first_overlaps"] = [[vars(a), vars(b)] for a, b in overlaps(intervals)[:5]]
data["longest_s"] = max((i.end - i.start for i in intervals), default=0.0)
open(sys.argv[2], "w").write(json.dumps(data, indent=1) + "\n")
sys.exit(0 if report.overlapping_pairs == 0 else 3)
EOF
case $? in
    0) record overlap "ok (none)" ;;
    3) record overlap "FAILED: timed sections overlapped (lock_report.json)" ;;
    *) record overlap "FAILED (no lock log?)" ;;
esac

# --- 5. the database, whatever happened above: one file (WAL folded in), and what it holds ----------
step "5. database"
python3 - "$WORK/tune.sqlite" "$OUT/tune.sqlite" <<'EOF'
import os, sqlite3, sys
if not os.path.exists(sys.argv[1]):
    sys.exit(f"no database at {sys.argv[1]}")
source = sqlite3.connect(sys.argv[1])
target = sqlite3.connect(sys.argv[2])
source.backup(target)
target.execute("PRAGMA journal_mode=DELETE")
target.close()
rows = source.execute("SELECT status, COUNT(*) FROM trials GROUP BY status").fetchall()
print("trials by status:", ", ".join(f"{s} {n}" for s, n in rows) or "none")
EOF
[ $? = 0 ] && record database ok || record database "FAILED (no database?)"
gt db list --db "$OUT/tune.sqlite" 2>&1 | tail -30

# --- summary (last) -------------------------------------------------------------------------------
step "summary"
for line in "${STATUS[@]}"; do echo "  $line"; done
grep -h "tuning .* shapes on\|s wall on\|shapes were tuned when\|workload GEMM time per model step\|^GPU lock:\|^busy per holder" \
    "$OUT/tune_many.txt" | sed 's/^/  /'
echo "  wall $(elapsed) s; in \$OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
