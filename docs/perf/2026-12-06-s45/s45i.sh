#!/usr/bin/env bash
# Session 45, call I (not run: no device time left; for the next session): Nsight Compute on the KDA split form's
# state kernel (bundle s45e = 6b16841) at 16K x 96 heads: is its ~4.3 us per chunk the record stream (72.5 KB per
# chunk per CTA, one record in flight) or the mma chain? Speed of light, memory workload, warp states, per-instruction
# stall samples (tools/ncu_sass_hotspots.py), and the prep kernel's headline beside it.
set -uo pipefail
NAME=s45e; O=/tmp/out.s45i; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s45i.tgz" *.txt *.log 2>/dev/null; cd - > /dev/null; }
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
ncu=/usr/local/cuda/bin/ncu
timeout 200 $ncu --clock-control none -k regex:delta_rule_state_kernel --launch-count 1 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters --section Occupancy \
  --section SchedulerStats -o "$O/st" "$P/bin/penstock_bench_kernels" --only kda --warmup 0 --reps 1 > "$O/st.ncu.log" 2>&1
echo "ncu rc $? at ${SECONDS}s"
$ncu -i "$O/st.ncu-rep" --page details > "$O/st.details.txt" 2>&1
$ncu -i "$O/st.ncu-rep" --page source --print-source sass --csv > "$O/st.sass.csv" 2> /dev/null; rm -f "$O/st.ncu-rep"
python3 tools/ncu_sass_hotspots.py "$O/st.sass.csv" --top 30 > "$O/st.hotspots.txt" 2>&1; rm -f "$O/st.sass.csv"
grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Hit|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy" \
  "$O/st.details.txt" | head -10
sed -n '/^top/,$p' "$O/st.hotspots.txt" | head -50 | cut -c1-160
save
