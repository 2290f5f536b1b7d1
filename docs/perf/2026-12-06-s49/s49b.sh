#!/usr/bin/env bash
# Session 49, call B (run as a one-line command on call A's warm H100, same bundle s49a with s48d beside it): the goal
# rows with the code that lands: DeepSeek-V3 layer 3 at 16K, bf16 with s49a (the bf16 kernel's lazy max) and native
# FP8 + --fp8-attention with s48d (the FP8 kernel as landed: call A dropped its lazy max), around torch.compile's
# composition in the same call.
set -uo pipefail
NAME=s49a; O=/tmp/out.s49b; source tools/device_bundle_env.sh
save() { cd "$O" && tar czf "${OUT}/s49b.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
LAYER_REPS=6 layer s49a dsv3bf.1 deepseek-v3.json 3:4 16384 --fp8-weights dequant
LAYER_REPS=6 layer s48d dsv3f8.1 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
save
torch_layer deepseek-v3 16384 170
save
LAYER_REPS=6 layer s49a dsv3bf.2 deepseek-v3.json 3:4 16384 --fp8-weights dequant
LAYER_REPS=6 layer s48d dsv3f8.2 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
save
