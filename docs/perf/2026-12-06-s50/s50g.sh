#!/usr/bin/env bash
# Session 50, call G (after call F, on its warm machine; any GPU): GLM-5.3 layer 6 at 16K (native FP8, FP8 indexer,
# fp8-accumulate) around torch.compile's composition in the same call, then DeepSeek-V3's bf16 and FP8 layers once more.
set -uo pipefail
NAME=s50b; O=/tmp/out.s50g; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s50g.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
G=(--fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate)
LAYER_REPS=6 layer s50b glm16.1 glm-5.3.json 6:7 16384 "${G[@]}"
torch_layer glm-5.3 16384 200
LAYER_REPS=6 layer s50b glm16.2 glm-5.3.json 6:7 16384 "${G[@]}"
save
[ "${SECONDS}" -lt 420 ] || exit 0
LAYER_REPS=6 layer s50b dsv3bf.3 deepseek-v3.json 3:4 16384 --fp8-weights dequant
LAYER_REPS=6 layer s50b dsv3f8.3 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
save
