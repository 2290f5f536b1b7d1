#!/usr/bin/env bash
# Session 46, call H (not run: no device time left; for the next session, any GPU): bundle s46c. Nsight Compute on
# the attention kernels of the DeepSeek-V3 layer at 16K, each as it is and as its MMA-only probe (the same loads and
# products, no softmax): the bf16 kernel (bf16 weights) and the FP8 kernel (native FP8 + --fp8-attention). The
# question: is the probes' ceiling (bf16 742 TFLOP/s = 75% of peak, FP8 1271 = 64%) set by the K / V stream from L2?
# Every 128-row CTA streams its head's keys: per key tile 80 KB (bf16, d 192 / 128) or ~41 KB (e4m3), i.e. ~85 GB per
# bf16 call at 16K x 128 heads (~5 TB/s at 17 ms) and ~43 GB per FP8 call (~3.5 TB/s at 12.3 ms). If L2 throughput
# is near its peak, the next step is 2-CTA clusters of adjacent q tiles of one head multicasting each K / V tile.
set -uo pipefail
NAME=s46c; O=/tmp/out.s46h; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s46h.tgz" *.txt *.log 2>/dev/null; cd - > /dev/null; }
ncu=/usr/local/cuda/bin/ncu
prof() {  # TAG KERNEL_REGEX PROBE_ENV PROBE_VALUE MODEL_BENCH_FLAGS...
  local tag=$1 regex=$2 penv=$3 pval=$4; shift 4
  env "$penv=$pval" timeout 200 $ncu --clock-control none -k "regex:$regex" --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats \
    --section ComputeWorkloadAnalysis -o "$O/$tag" "$P/bin/penstock_model_bench" --config "$P/configs/deepseek-v3.json" \
    --layers 3:4 --tokens 16384 --reps 1 "$@" > "$O/$tag.ncu.log" 2>&1
  echo "ncu $tag rc $? at ${SECONDS}s"
  $ncu -i "$O/$tag.ncu-rep" --page details > "$O/$tag.details.txt" 2>&1; rm -f "$O/$tag.ncu-rep"
  grep -E "Duration|L2 Cache Throughput|L1/TEX Cache Throughput|DRAM Throughput|L2 Hit Rate|Compute \(SM\) Throughput|Issue Slots Busy" \
    "$O/$tag.details.txt" | head -9
  save
}
prof bf16 attention_bf16_kernel PENSTOCK_ATTN_PROBE none --fp8-weights dequant
prof bf16.mma attention_bf16_kernel PENSTOCK_ATTN_PROBE mma --fp8-weights dequant
prof fp8 attention_fp8_kernel PENSTOCK_FP8_ATTN_PROBE none --fp8-weights native --fp8-attention
prof fp8.mma attention_fp8_kernel PENSTOCK_FP8_ATTN_PROBE mma --fp8-weights native --fp8-attention
