#!/usr/bin/env bash
# Session 25, call C: Nsight Compute on the DSA top-k select kernel at T 65536 (the dsa kernel bench's second
# kRangeRadixUnsampled launch at 64K, launch 116 of the select kernels; then the sampled kernel's second, launch 120):
# speed of light, warp states, scheduler and instruction statistics, memory tables, and the SASS with stall samples.
set -uo pipefail
N=${NAME:-s25b}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/s25c; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
for skip in 115 119; do
  timeout 170 $NCU --clock-control none -k regex:dsa_topk_select_kernel --launch-skip $skip --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section SourceCounters \
    -o $O/topk.$skip $P/bin/penstock_bench_kernels --only dsa --warmup 1 --reps 2 > $O/ncu.$skip.log 2>&1
  echo "ncu skip $skip rc $? at ${SECONDS}s"
  $NCU -i $O/topk.$skip.ncu-rep --page details > $O/details.$skip.txt 2>&1
  $NCU -i $O/topk.$skip.ncu-rep --page source --print-source sass --csv > $O/sass.$skip.csv 2>&1
  grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Stall|No Eligible|Achieved Occupancy|Executed Ipc|Memory Throughput|Compute \(SM\)" $O/details.$skip.txt | head -30
done
cd $O && tar czf $OUT/s25c.tgz *.txt *.csv *.log
