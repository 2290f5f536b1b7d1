#!/usr/bin/env bash
# Session 53, call B (any GPU). Bundle s53b (this session's work tree): the TMA-store epilogue in the FP8 GEMM
# (kWgmmaTmaWideSt / kWgmmaTmaPairSt; PENSTOCK_FP8_TMA_STORE picks kAuto's form) and in the bf16 grouped GEMM
# (kTmaDynSt / kTmaDynClusterSt; PENSTOCK_GG_TMA_STORE picks kDevice's), and session 52's call A (the wgmma probe's
# random-operand rows, the model bench's host enqueue time). nvidia-smi samples the SM clock and power every 50 ms;
# marks.log timestamps each phase. In order of need (each phase saves the results tar as it ends):
# 1. conformance: Fp8TmaTest.* and the bf16 dynamic kernels' tests (the St forms against the reference; the FP8 ones
#    byte for byte against the register stores);
# 2. the DeepSeek-V3 expert GEMMs at T = 16384: FP8 (--only fp8) and bf16 down (--only grouped, one case);
# 3. the DeepSeek-V3 layer at 16K, FP8 (native + --fp8-attention) with PENSTOCK_FP8_TMA_STORE 0 / 1 / 1 / 0, bf16
#    with PENSTOCK_GG_TMA_STORE 0 / 1 / 1 / 0;
# 4. the probe; 5. layers 3:5 at T 256 / 1024 / 4096, bf16 and FP8 (host enqueue).
set -uo pipefail
NAME=s53b; O=/tmp/out.s53b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
smi_start
save() { cd "$O" && tar czf "${OUT:-/tmp}/s53b.tgz" *.log *.jsonl *.json *.csv 2>/dev/null; cd - > /dev/null; }
mark conformance
ST_OK=1
conformance "$P/bin/cuda_kernels_test" \
  'Fp8TmaTest.*:*GroupedGemmKernelTest*tma_dyn*:GroupedGemmDeviceTest.TmaDynTailHeavyRoutingFinishes:GroupedGemmDeviceTest.TmaStore*' 240 || ST_OK=0
grep -E 'bytes differ|FAILED|Failure' "$O/conf.log" | head -8
mark idle; save
fp8() {
  mark "fp8.$1"
  PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=16384 timeout 120 "$P/bin/penstock_bench_kernels" --only fp8 \
    > "$O/fp8.$1.jsonl" 2> "$O/fp8.$1.err.log"
  echo "fp8 bench round $1 rc $? at ${SECONDS}s"; fp8_lines "$O/fp8.$1.jsonl" "r$1"
  mark idle; sleep 1; save
}
st_layer() {  # st_layer FP8|BF16 0|1 ROUND
  mark "layer.$1.st$2.$3"
  if [ "$1" = fp8 ]; then
    PENSTOCK_FP8_TMA_STORE=$2 LAYER_REPS=6 layer s53b "dsv3f8.st$2.$3" deepseek-v3.json 3:4 16384 \
      --fp8-weights native --fp8-attention
  else
    PENSTOCK_GG_TMA_STORE=$2 LAYER_REPS=6 layer s53b "dsv3bf.st$2.$3" deepseek-v3.json 3:4 16384 \
      --fp8-weights dequant
  fi
  mark idle; sleep 1; save
}
gg() {
  mark "gg.$1"
  PENSTOCK_BENCH_GG_CASE=deepseek_v3:down:16384 PENSTOCK_BENCH_GG_KERNELS=tma_dyn,tma_dyn_st,tma_dyn_cluster,tma_dyn_cluster_st \
    timeout 120 "$P/bin/penstock_bench_kernels" --only grouped > "$O/gg.$1.jsonl" 2> "$O/gg.$1.err.log"
  echo "bf16 grouped bench round $1 rc $? at ${SECONDS}s"
  gg_lines "$O/gg.$1.jsonl" "r$1"
  mark idle; sleep 1; save
}
if [ "$ST_OK" = 1 ]; then
  fp8 1; gg 1
  st_layer fp8 0 1; st_layer fp8 1 1; st_layer bf16 0 1; st_layer bf16 1 1
  st_layer fp8 1 2; st_layer fp8 0 2; st_layer bf16 1 2; st_layer bf16 0 2
fi
mark probe
"$P/bin/penstock_bench_kernels" --only wgmma_probe > "$O/probe.jsonl" 2> "$O/probe.log"
echo "probe rc $? at ${SECONDS}s"
mark idle; sleep 1; save
[ "$ST_OK" = 1 ] && { fp8 2; gg 2; }
short() {
  mark "short.$1"
  local flags=(); [ "$1" = native ] && flags=(--fp8-weights native --fp8-attention)
  timeout 200 "$P/bin/penstock_model_bench" --config "$P/configs/deepseek-v3.json" --layers 3:5 --tokens 256,1024,4096 \
    --reps 8 "${flags[@]}" --json "$O/short.$1.json" > "$O/short.$1.log" 2>&1
  echo "short layers $1 rc $? at ${SECONDS}s"
  mark idle; sleep 1; save
}
short native; short bf16
mark idle
kill "$SMI" 2>/dev/null; sleep 0.3
save
probe_lines "$O/probe.jsonl"
phase_clocks
enqueue_lines "$O/short.native.json" "3:5 FP8"
enqueue_lines "$O/short.bf16.json" "3:5 bf16"
