#!/usr/bin/env bash
# Session 50, call F (an H200 only: torch's Kimi K3 KDA composition does not fit an 80 GB H100; elsewhere it stops at
# once): the H200 goal rows with the landed code (bundle s50b: session 50's FP8 GEMM scales one k-step ahead, session
# 49's bf16 lazy max, session 48's FP8 attention), each beside its same-call baseline: DeepSeek-V3 layer 3 at 16K,
# bf16 (dequant) and native FP8 + --fp8-attention, around torch.compile; then Kimi K3 layer 1 (KDA) native FP8 around
# torch.compile + fla chunk_kda.
set -uo pipefail
NAME=s50b; O=/tmp/out.s50f; source tools/device_bundle_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s50f.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
case "$gpu" in *H200*) ;; *) echo "not an H200 ($gpu): stopping"; exit 0 ;; esac
LAYER_REPS=6 layer s50b dsv3bf.1 deepseek-v3.json 3:4 16384 --fp8-weights dequant
LAYER_REPS=6 layer s50b dsv3f8.1 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
torch_layer deepseek-v3 16384 150
LAYER_REPS=6 layer s50b dsv3bf.2 deepseek-v3.json 3:4 16384 --fp8-weights dequant
LAYER_REPS=6 layer s50b dsv3f8.2 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
save
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
LAYER_REPS=5 layer s50b k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
torch_layer kimi-k3-kda 16384 200
LAYER_REPS=5 layer s50b k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
save
