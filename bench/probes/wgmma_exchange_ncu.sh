#!/bin/bash
# Probe: where the split tail's exchange spends its time at 512x512x65536 bf16 (the eval row under
# 0.85x cuBLAS), by Nsight Compute counters of the exchange probe's builds (wgmma_exchange_cost.py):
# DRAM and L2 bytes, hit rates and throughputs of "no exchange", "stores only", "shares, no wait" and
# "shares", one variant a process (the 5th launch of its kernel is profiled; ncu empties the caches
# before it and leaves the clocks alone), then the shares build's warp stalls per SASS instruction.
# Does the 16 MB of fp32 partial tiles go through L2 only, or out to DRAM and back?
#
#   bash bench/probes/wgmma_exchange_ncu.sh OUTDIR      (on the GPU machine; PYTHONPATH as below)
#
# Written 2026-11-26; not yet run (no device time was left that day).
set -u
out=${1:?usage: wgmma_exchange_ncu.sh OUTDIR}
mkdir -p "$out"
export PYTHONPATH=$PWD/src:$PWD/bench:${PYTHONPATH:-} PYTHONUNBUFFERED=1
probe="python bench/probes/wgmma_exchange_cost.py --shapes 512x512x65536:bf16 --reps 3"
ncu="ncu --clock-control none -k regex:wgmma_ --launch-skip 4 --launch-count 1"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,\
lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sector_op_read_hit_rate.pct,\
lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
for variant in "no exchange" "stores only" "shares, no wait" "shares"; do
  tag=$(echo "$variant" | tr -cd 'a-z')
  $ncu --metrics $metrics --csv --page raw $probe --variants "$variant" > "$out/ncu_$tag.csv" 2> "$out/ncu_$tag.err" \
    || { echo "ncu failed on '$variant':"; tail -5 "$out/ncu_$tag.err"; }
done
$ncu --section WarpStateStats --section SourceCounters --section SpeedOfLight --section MemoryWorkloadAnalysis \
  -o "$out/shares" $probe --variants shares > "$out/shares.log" 2>&1 || tail -5 "$out/shares.log"
ncu --import "$out/shares.ncu-rep" --page details > "$out/shares_details.txt" 2>&1
ncu --import "$out/shares.ncu-rep" --page source --csv --print-source sass > "$out/shares_sass.csv" 2> "$out/sass.err" \
  && gzip -f "$out/shares_sass.csv" || tail -3 "$out/sass.err"
python - "$out" <<'PY'
import csv, glob, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "ncu_*.csv"))):
    rows = list(csv.reader(open(path)))
    header = next((i for i, row in enumerate(rows) if row and row[0] == "ID"), None)
    if header is None or len(rows) < header + 3:
        print(os.path.basename(path), "no rows")
        continue
    print("==", os.path.basename(path))
    for name, unit, value in zip(rows[header], rows[header + 1], rows[header + 2]):
        if "__" in name:
            print(f"   {name:60s} {value:>16s} {unit}")
PY
