#!/usr/bin/env bash
# Session 47, call F (any GPU): the final same-call rows with bundle s47d (= 1598b8f's code, HEAD's) beside s47c
# (41c8ab2's code): the DeepSeek-V3 layer at 16K, native FP8 + --fp8-attention (is call E's slow FP8 attention scope,
# 15.8-16.1 ms with the split patch built in, that patch or that machine?) and bf16 weights, then torch.compile's
# layer for the bf16 ratio.
set -uo pipefail
NAME=s47d; O=/tmp/out.s47f; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s47f.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
for r in 1 2; do for b in s47d s47c; do
  LAYER_REPS=6 layer $b dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done; done
save
for r in 1 2 3; do for b in s47d s47c; do
  LAYER_REPS=6 layer $b dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
done; done
save
torch_layer deepseek-v3 16384 120
for b in s47d s47c; do LAYER_REPS=6 layer $b dsv3bf.4 deepseek-v3.json 3:4 16384 --fp8-weights dequant; done
LAYER_REPS=6 layer s47d dsv3f8.3 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
save
