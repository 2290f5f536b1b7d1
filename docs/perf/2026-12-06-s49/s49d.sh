#!/usr/bin/env bash
# Session 49, call D (an H200 only: on another GPU it stops at once): the H200 goal rows with the landed code, bundle
# s49a (its bf16 path = the landed bf16 kernel) with s48d (its FP8 path = the landed FP8 kernel): DeepSeek-V3 layer 3
# at 16K, bf16 (s49a) and native FP8 + --fp8-attention (s48d), around torch.compile's composition in the same call.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: nothing run"; exit 0; }
NAME=s49a; O=/tmp/out.s49d; source tools/device_bundle_env.sh
save() { cd "$O" && tar czf "${OUT:-/tmp}/s49d.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
for r in 1 2; do
  LAYER_REPS=6 layer s49a dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer s48d dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done
save
torch_layer deepseek-v3 16384 170
save
for r in 3 4; do
  LAYER_REPS=6 layer s49a dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer s48d dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done
save
