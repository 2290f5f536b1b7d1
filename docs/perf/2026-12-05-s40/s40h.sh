#!/usr/bin/env bash
# Session 40, call H (one H200, needs_h200: torch's Kimi K3 composition does not fit 80 GB): a shortened s40d.sh at
# b57f643 (bundle s40c). DeepSeek-V3 layer 3 at 16K, bf16 and native FP8 + --fp8-attention, around
# torch_layer_baseline.py's composition; Kimi K3 layer 1 (KDA + latent MoE) with native FP8 and bf16 weights around
# torch.compile + fla chunk_kda (fla 0.6.0 wheels in .whl).
set -uo pipefail
NAME=s40c; O=/tmp/out.s40h; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
torch_layer() {  # MODEL TOKENS TIMEOUT
  PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout "$3" python3 tools/torch_layer_baseline.py --model "$1" \
    --configs "$P/configs" --tokens "$2" > "$O/torch.$1.$2.log" 2>&1
  echo "torch $1 $2 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.$1.$2.log"
}
save() { cd "$O" && tar czf "${OUT:-/tmp}/s40h.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
layer s40c dsv3bf.1 deepseek-v3.json 3:4 16384 --fp8-weights dequant
layer s40c dsv3f8.1 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
torch_layer deepseek-v3 16384 90
layer s40c dsv3bf.2 deepseek-v3.json 3:4 16384 --fp8-weights dequant
layer s40c dsv3f8.2 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
save
layer s40c k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
layer s40c k3kdabf.1 kimi-k3.json 1:2 16384 --fp8-weights dequant
torch_layer kimi-k3-kda 16384 $((270 - SECONDS))
layer s40c k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
save
