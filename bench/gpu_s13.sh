#!/bin/sh
# Session 13 device calls (H100): is the fused kernel's last half per cent cycles or clock?
# Back-to-back power/clock/cycles (power_probe.py), ncu counters of the fused kernel and its GEMM
# alone at the card's own clock, paired timing of set s13, and (call 2 on) the d_over_c GPU tests.
#   sh bench/gpu_s13.sh CALL GROUP_M      (call 1 ran group_m 8 and s13 as its first form)
call=${1:-2}
group=${2:-16}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
cd bench
timeout 240 python3 bench_paired.py --set s13 --rounds 300 --graph --json $OUT/s13-$call-paired.json > $OUT/s13-$call-paired.md 2>&1
echo "paired: exit $?"
timeout 100 python3 power_probe.py --seconds 3 --reps 2 --group-m $group --json $OUT/s13-$call-power.json > $OUT/s13-$call-power.md 2>&1
echo "power: exit $?"
M=gpu__time_duration.sum,gpc__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum
for k in alone fused; do
  timeout 90 ncu --clock-control none --kernel-name regex:wgmma --launch-count 12 --metrics $M --csv \
    python3 power_probe.py --ncu $k --group-m $group > $OUT/s13-$call-ncu-$k.csv 2> $OUT/s13-$call-ncu-$k.err
  echo "ncu $k: exit $?"
done
cd ..
if [ "$call" != 1 ]; then
  timeout 150 python3 -m pytest -v -m gpu tests/test_gpu_wgmma.py -k d_over_c > $OUT/s13-$call-gpu-tests.log 2>&1
  echo "tests: exit $?"; grep -c PASSED $OUT/s13-$call-gpu-tests.log; grep -E "FAILED|Error|Timeout" $OUT/s13-$call-gpu-tests.log | head -5
fi
OUT=$OUT CALL=$call python3 - <<'PY'
import csv, os
out, call = os.environ["OUT"], os.environ["CALL"]
for k in ("alone", "fused"):
    try:
        rows = [r for r in csv.reader(open(f"{out}/s13-{call}-ncu-{k}.csv")) if len(r) > 10]
    except OSError:
        continue
    if not rows:
        continue
    head, body = rows[0], rows[1:]
    col = lambda name: head.index(name)
    ids = sorted({r[col("ID")] for r in body if r[col("ID")].isdigit()}, key=int)
    for i in ids[-2:]:
        vals = {r[col("Metric Name")]: r[col("Metric Value")] for r in body if r[col("ID")] == i}
        print(k, i, "; ".join(f"{m}={v}" for m, v in vals.items()))
PY
grep -v "^$" $OUT/s13-$call-power.md | tail -9
sed -n '/^# Paired/,$p' $OUT/s13-$call-paired.md | grep -v "^$" | grep -v "^|---"
