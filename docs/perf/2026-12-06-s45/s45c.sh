#!/usr/bin/env bash
# Session 45, call C: Nsight Compute on the bf16 prep kernel (bundle s45a = bea9d2b's code) at 16K x 96: speed of
# light, memory workload, warp states, occupancy and per-source-line stall samples (the lineinfo paths point at
# /work/main: linked to this checkout when the machine allows).
set -uo pipefail
NAME=s45a; O=/tmp/out.s45c; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s45c.tgz" *.txt *.csv *.log 2>/dev/null; cd - > /dev/null; }
[ -e /work/main ] || { mkdir -p /work 2>/dev/null && ln -s "$PWD" /work/main 2>/dev/null; } || true
ls /work/main/src/kernels/cuda/kda_chunk_tc.cu > /dev/null 2>&1 && echo "source linked" || echo "source not linked"
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
ncu=/usr/local/cuda/bin/ncu
timeout 200 $ncu --clock-control none -k regex:prep_bf16 --launch-count 1 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters --section Occupancy \
  --section LaunchStats --section SchedulerStats --import-source yes -o "$O/p2" "$P/bin/penstock_bench_kernels" --only kda \
  --warmup 0 --reps 1 > "$O/p2.ncu.log" 2>&1
echo "ncu rc $? at ${SECONDS}s"
$ncu -i "$O/p2.ncu-rep" --page details > "$O/p2.details.txt" 2>&1
$ncu -i "$O/p2.ncu-rep" --page source --print-source cuda --csv > "$O/p2.cuda.csv" 2> "$O/p2.err.txt"
$ncu -i "$O/p2.ncu-rep" --page source --print-source sass --csv > "$O/p2.sass.csv" 2>> "$O/p2.err.txt"
rm -f "$O/p2.ncu-rep"
python3 tools/ncu_sass_hotspots.py "$O/p2.sass.csv" --top 30 > "$O/p2.hotspots.txt" 2>&1
grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Executed Instructions  |Stall" "$O/p2.details.txt" | head -30
python3 - "$O/p2.cuda.csv" <<'PY' > "$O/p2.lines.txt" 2>&1
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
hi = next(i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in c for c in r))
h = rows[hi]; col = next(i for i, c in enumerate(h) if "Warp Stall Sampling (All" in c)
src = next(i for i, c in enumerate(h) if c.strip() == "Source")
line = next((i for i, c in enumerate(h) if c.strip() == "#"), 0)
data = []
for r in rows[hi + 1:]:
    try: v = float(r[col] or 0)
    except (ValueError, IndexError): continue
    if v > 0: data.append((v, r[line], r[src].strip()[:150]))
tot = sum(v for v, _, _ in data) or 1
for v, l, s in sorted(data, reverse=True)[:45]: print(f"{100*v/tot:5.1f}% line {l}: {s}")
PY
head -45 "$O/p2.lines.txt"; sed -n '/^regions/,$p' "$O/p2.hotspots.txt" | head -16
save
