#!/usr/bin/env bash
# Session 55, call A (any GPU; the goal rows want an H200): bundle s53b on its default path (the TMA-store forms off,
# the code of this session's HEAD, which dropped them). Phases, each saving s55a.tgz as it ends:
# 1. the goal rows: DeepSeek-V3 layer 3 at 16K, bf16 (--fp8-weights dequant) and native FP8 + --fp8-attention, three
#    interleaved rounds of 8 reps, around two torch.compile runs (tools/torch_layer_baseline.py) in the same call;
# 2. session 52's open questions (s53b.sh's later phases): the wgmma probe with random operands (is the consumers'
#    ceiling the power limit?) and layers 3:5 at T 256 / 1024 / 4096 (the host's enqueue time against the forward's);
# nvidia-smi samples the SM clock and power every 50 ms through all of it (phase_clocks).
#   run: bash docs/perf/2026-12-07-s55/s55a.sh, carry build-dev-lead/s53b.tar.xz
set -uo pipefail
NAME=s53b; O=/tmp/out.s55a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
smi_start
save() { cd "$O" && tar czf "${OUT:-/tmp}/s55a.tgz" *.log *.json *.jsonl *.csv 2>/dev/null; cd - > /dev/null; }
row() {  # row bf16|fp8 ROUND
  mark "layer.$1.$2"
  if [ "$1" = fp8 ]; then
    layer s53b "dsv3f8.$2" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  else
    layer s53b "dsv3bf.$2" deepseek-v3.json 3:4 16384 --fp8-weights dequant
  fi
  mark idle; sleep 1; save
}
tl() { mark "torch.$1"; torch_layer deepseek-v3 16384 170; mv "$O/torch.deepseek-v3.16384.log" "$O/torch.$1.log"; mark idle; save; }
row bf16 1; row fp8 1; tl 1
row bf16 2; row fp8 2; tl 2
row fp8 3; row bf16 3
mark probe
timeout 150 "$P/bin/penstock_bench_kernels" --only wgmma_probe > "$O/probe.jsonl" 2> "$O/probe.log"
echo "probe rc $? at ${SECONDS}s"
mark idle; sleep 1; save
short() {
  mark "short.$1"
  local flags=(); [ "$1" = native ] && flags=(--fp8-weights native --fp8-attention)
  timeout 150 "$P/bin/penstock_model_bench" --config "$P/configs/deepseek-v3.json" --layers 3:5 --tokens 256,1024,4096 \
    --reps 8 "${flags[@]}" --json "$O/short.$1.json" > "$O/short.$1.log" 2>&1
  echo "short layers $1 rc $? at ${SECONDS}s"
  mark idle; sleep 1; save
}
short native; short bf16
kill "$SMI" 2>/dev/null; sleep 0.3
save
probe_lines "$O/probe.jsonl"
phase_clocks
enqueue_lines "$O/short.native.json" "3:5 FP8"
enqueue_lines "$O/short.bf16.json" "3:5 bf16"
