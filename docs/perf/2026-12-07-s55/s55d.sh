#!/usr/bin/env bash
# Session 55, call D (any GPU): bundle s55d (0ab07d3 + s55d-gg-pairs-glu-knob.diff, not landed: with
# PENSTOCK_GG_PAIRS=glu the bf16 fused gated GEMM keeps the CTA pairs and the plain grouped GEMM, the routed down
# projection, runs kTmaDyn). Call 1's kernel bench had the bf16
# down GEMM at 6310 us on kTmaDyn against 6612 on the pairs (T 16384). Phases, each saving s55d.tgz:
# 1. conformance (the dynamic kernels and the fused gated form); stops on a failure;
# 2. DeepSeek-V3 layer 3 at 16K, bf16: PENSTOCK_GG_PAIRS unset / glu in the order u g g u u g; GLM-5.3 layer 6,
#    u g g u;
# 3. the FP8 twin, PENSTOCK_FP8_PAIR unset / glu (the FP8 down GEMM on the wide kernel), u g g u u g;
# 4. the bf16 down GEMM alone: kTmaDyn against kTmaDynCluster, DeepSeek-V3 and Kimi K3 at T 16384.
#   run: bash docs/perf/2026-12-07-s55/s55d.sh, carry build-dev-lead/s55d.tar.xz
set -uo pipefail
NAME=s55d; O=/tmp/out.s55d; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s55d.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" \
  'GroupedGemmDeviceTest.Glu*:GroupedGemmDeviceTest.TmaDyn*:GroupedGemmKernelTest*tma_dyn*' 200 \
  || { grep -E 'FAILED|Failure' "$O/conf.log" | head -12; save; exit 0; }
save
bf() {  # bf u|g ROUND
  if [ "$1" = g ]; then PENSTOCK_GG_PAIRS=glu layer s55d "dsv3bf.$1.$2" deepseek-v3.json 3:4 16384 --fp8-weights dequant
  else layer s55d "dsv3bf.$1.$2" deepseek-v3.json 3:4 16384 --fp8-weights dequant; fi
  save
}
glm() {
  if [ "$1" = g ]; then PENSTOCK_GG_PAIRS=glu layer s55d "glm.$1.$2" glm-5.3.json 6:7 16384 --fp8-weights dequant
  else layer s55d "glm.$1.$2" glm-5.3.json 6:7 16384 --fp8-weights dequant; fi
  save
}
f8() {
  if [ "$1" = g ]; then
    PENSTOCK_FP8_PAIR=glu layer s55d "dsv3f8.$1.$2" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  else layer s55d "dsv3f8.$1.$2" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; fi
  save
}
bf u 1; bf g 1; bf g 2; bf u 2; bf u 3; bf g 3
glm u 1; glm g 1; glm g 2; glm u 2
f8 u 1; f8 g 1; f8 g 2; f8 u 2; f8 u 3; f8 g 3
for c in deepseek_v3:down:16384 kimi_k3:down:16384; do
  PENSTOCK_BENCH_GG_CASE=$c PENSTOCK_BENCH_GG_KERNELS=tma_dyn,tma_dyn_cluster timeout 60 \
    "$P/bin/penstock_bench_kernels" --only grouped > "$O/gg.${c%%:*}.jsonl" 2> "$O/gg.${c%%:*}.err.log"
  echo "grouped bench $c rc $?"; gg_lines "$O/gg.${c%%:*}.jsonl" "$c"
done
save
