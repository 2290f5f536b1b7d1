#!/usr/bin/env bash
# Session 46, call H (not run: no device time left; for the next session, any GPU): bundle s46c. Nsight Compute on
# the FP8 attention kernel of the DeepSeek-V3 FP8 layer at 16K (native FP8 + --fp8-attention), as it is and as the
# MMA-only probe (PENSTOCK_FP8_ATTN_PROBE=mma: the same loads and products, no softmax), to test whether the probe's
# ceiling (1271 TFLOP/s, 64% of the e4m3 peak) is set by the K / V stream from L2: each 128-row CTA streams its head's
# keys, ~43 GB per call at 16K x 128 heads, ~3.5 TB/s at 12.3 ms. If L2 throughput is near its peak in the probe, the
# next step is 2-CTA clusters of adjacent q tiles of one head multicasting each K / V tile (half the L2 reads).
set -uo pipefail
NAME=s46c; O=/tmp/out.s46h; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s46h.tgz" *.txt *.log 2>/dev/null; cd - > /dev/null; }
ncu=/usr/local/cuda/bin/ncu
for probe in none mma; do
  PENSTOCK_FP8_ATTN_PROBE=$([ $probe = mma ] && echo mma || echo "") timeout 200 $ncu --clock-control none \
    -k regex:attention_fp8_kernel --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section ComputeWorkloadAnalysis \
    -o "$O/fa8.$probe" "$P/bin/penstock_model_bench" --config "$P/configs/deepseek-v3.json" --layers 3:4 \
    --tokens 16384 --reps 1 --fp8-weights native --fp8-attention > "$O/fa8.$probe.ncu.log" 2>&1
  echo "ncu $probe rc $? at ${SECONDS}s"
  $ncu -i "$O/fa8.$probe.ncu-rep" --page details > "$O/fa8.$probe.details.txt" 2>&1; rm -f "$O/fa8.$probe.ncu-rep"
  grep -E "Duration|L2 Cache Throughput|L1/TEX Cache Throughput|DRAM Throughput|L2 Hit Rate|Compute \(SM\) Throughput|Issue Slots Busy" \
    "$O/fa8.$probe.details.txt" | head -9
  save
done
