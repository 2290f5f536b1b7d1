#!/usr/bin/env bash
# Session 50, call H (any GPU; the fallback when no H200 comes): the goal rows with the landed code (bundle s50b), each
# beside its same-call baseline: DeepSeek-V3 layer 3 at 16K, bf16 (dequant) and native FP8 + --fp8-attention, around
# torch.compile's composition; GLM-5.3 layer 6 at 16K (native FP8, FP8 indexer, fp8-accumulate) around its own.
set -uo pipefail
NAME=s50b; O=/tmp/out.s50h; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s50h.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
LAYER_REPS=6 layer s50b dsv3bf.1 deepseek-v3.json 3:4 16384 --fp8-weights dequant
LAYER_REPS=6 layer s50b dsv3f8.1 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
torch_layer deepseek-v3 16384 170
LAYER_REPS=6 layer s50b dsv3bf.2 deepseek-v3.json 3:4 16384 --fp8-weights dequant
LAYER_REPS=6 layer s50b dsv3f8.2 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
save
[ "${SECONDS}" -lt 330 ] || exit 0
G=(--fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate)
LAYER_REPS=6 layer s50b glm16.1 glm-5.3.json 6:7 16384 "${G[@]}"
torch_layer glm-5.3 16384 $((560 - SECONDS))
LAYER_REPS=6 layer s50b glm16.2 glm-5.3.json 6:7 16384 "${G[@]}"
save
