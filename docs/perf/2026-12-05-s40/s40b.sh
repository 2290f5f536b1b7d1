#!/usr/bin/env bash
# Session 40, call B (one H200): the long-context DSA row and Kimi K3's rows at HEAD beside their same-call baselines.
# GLM-5.3 layer 6 at T = 65536 (PERF.md's 64K anchor), native FP8 + FP8 indexer + fp8-accumulate, twice around
# torch's composition at 64K; Kimi K3 layer 1 (KDA + latent MoE) at 16K with native FP8 and bf16 weights around
# torch.compile + fla chunk_kda (fla 0.6.0 wheels carried in .whl); Kimi K3 layer 3 (gated MLA) likewise around
# torch's composition.
set -uo pipefail
NAME=s40a; O=/tmp/out.s40b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
torch_layer() {  # MODEL TOKENS TIMEOUT
  PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout "$3" python3 tools/torch_layer_baseline.py --model "$1" \
    --configs "$P/configs" --tokens "$2" > "$O/torch.$1.$2.log" 2>&1
  echo "torch $1 $2 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.$1.$2.log"
}
save() { cd "$O" && tar czf "${OUT:-/tmp}/s40b.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
LAYER_REPS=5 LAYER_TIMEOUT=150 layer s40a glm64f8.1 glm-5.3.json 6:7 65536 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
torch_layer glm-5.3 65536 230
LAYER_REPS=5 LAYER_TIMEOUT=150 layer s40a glm64f8.2 glm-5.3.json 6:7 65536 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
save
layer s40a k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
layer s40a k3kdabf.1 kimi-k3.json 1:2 16384 --fp8-weights dequant
torch_layer kimi-k3-kda 16384 150
layer s40a k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
save
layer s40a k3mlaf8.1 kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention
layer s40a k3mlabf.1 kimi-k3.json 3:4 16384 --fp8-weights dequant
torch_layer kimi-k3-mla 16384 120
save
