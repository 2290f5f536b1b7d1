#!/usr/bin/env bash
# Session 54, call B: s53b.sh cut to what fits ~4 minutes of device time (bundle s53b, no rebuild): the TMA-store
# forms' conformance (the FP8 grouped cases byte for byte against the register stores, both tail-heavy routing tests,
# the bf16 twins' bytes), then the DeepSeek-V3 layer 3 A/Bs at 16K, PENSTOCK_FP8_TMA_STORE (native FP8 +
# --fp8-attention) and PENSTOCK_GG_TMA_STORE (bf16) in the order 0, 1, 1, 0, five reps each, then the expert GEMMs
# in the kernel bench. Each phase saves s54b.tgz.
#   run: bash docs/perf/2026-12-07-s54/s54b.sh, carry build-dev-lead/s53b.tar.xz
set -uo pipefail
NAME=s53b; O=/tmp/out.s54b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s54b.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" \
  'Fp8TmaTest.GroupedGemm:Fp8TmaTest.GroupedGemmTailHeavyRoutingFinishes:GroupedGemmDeviceTest.TmaStore*:GroupedGemmDeviceTest.TmaDynTailHeavyRoutingFinishes' 90 \
  || { grep -E 'bytes differ|FAILED|Failure' "$O/conf.log" | head -8; save; exit 0; }
save
ab() { LAYER_REPS=5 tma_store_layer s53b "$@"; save; }  # ab fp8|bf16 ST ROUND
ab fp8 0 1; ab fp8 1 1; ab bf16 0 1; ab bf16 1 1; ab fp8 1 2; ab fp8 0 2; ab bf16 1 2; ab bf16 0 2
PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=16384 timeout 60 "$P/bin/penstock_bench_kernels" --only fp8 \
  > "$O/fp8.jsonl" 2> "$O/fp8.err.log"
echo "fp8 bench rc $? at ${SECONDS}s"; fp8_lines "$O/fp8.jsonl" r1; save
PENSTOCK_BENCH_GG_CASE=deepseek_v3:down:16384 PENSTOCK_BENCH_GG_KERNELS=tma_dyn,tma_dyn_st,tma_dyn_cluster,tma_dyn_cluster_st \
  timeout 60 "$P/bin/penstock_bench_kernels" --only grouped > "$O/gg.jsonl" 2> "$O/gg.err.log"
echo "bf16 grouped bench rc $? at ${SECONDS}s"
gg_lines "$O/gg.jsonl" r1
save
