#!/usr/bin/env bash
# Session 40, call D (one H200, needs_h200: torch's Kimi K3 layers do not fit an 80 GB H100, call B): every layer goal
# row of PERF.md at b57f643 (bundle s40c) beside its same-call baseline. DeepSeek-V3 layer 3 at 16K: bf16 and native
# FP8 + --fp8-attention alternated, torch_layer_baseline.py (eager, torch.compile) between; Kimi K3 layer 1 (KDA +
# latent MoE) with native FP8 and bf16 weights around torch.compile + fla chunk_kda (fla 0.6.0 wheels in .whl);
# Kimi K3 layer 3 (gated MLA) likewise; GLM-5.3 layer 6 (full indexer) at 16K and at T = 65536 with native FP8, the
# FP8 indexer and fp8-accumulate, around torch's composition at each T.
set -uo pipefail
NAME=s40c; O=/tmp/out.s40d; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
torch_layer() {  # MODEL TOKENS TIMEOUT
  PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout "$3" python3 tools/torch_layer_baseline.py --model "$1" \
    --configs "$P/configs" --tokens "$2" > "$O/torch.$1.$2.log" 2>&1
  echo "torch $1 $2 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.$1.$2.log"
}
save() { cd "$O" && tar czf "${OUT:-/tmp}/s40d.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
for round in 1 2; do
  layer s40c dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant
  layer s40c dsv3f8.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  [ $round = 1 ] && torch_layer deepseek-v3 16384 120
done
save
layer s40c k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
layer s40c k3kdabf.1 kimi-k3.json 1:2 16384 --fp8-weights dequant
torch_layer kimi-k3-kda 16384 200
layer s40c k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
save
layer s40c k3mlaf8.1 kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention
layer s40c k3mlabf.1 kimi-k3.json 3:4 16384 --fp8-weights dequant
torch_layer kimi-k3-mla 16384 120
save
layer s40c glmf8.1 glm-5.3.json 6:7 16384 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
torch_layer glm-5.3 16384 120
save
[ "${SECONDS}" -lt 420 ] || exit 0
LAYER_REPS=5 LAYER_TIMEOUT=100 layer s40c glm64f8.1 glm-5.3.json 6:7 65536 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
torch_layer glm-5.3 65536 $((570 - SECONDS))
save
