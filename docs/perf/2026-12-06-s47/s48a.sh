#!/usr/bin/env bash
# For the next session (an H200, needs_h200: torch's Kimi K3 KDA composition does not fit an 80 GB H100): bundle
# s47g (= 2255425's code: k_rope and the FP8 attention's exp_fma template). The H200 goal rows with session 47's
# changes, each beside its same-call baseline: Kimi K3 layer 1 (KDA) native FP8 and bf16 around torch.compile + fla
# chunk_kda; DeepSeek-V3 layer 3 at 16K, bf16 (dequant) and native FP8 + --fp8-attention, around torch.compile.
# Carry build-dev-lead/s47g.tar.xz and .whl.
set -uo pipefail
NAME=s47g; O=/tmp/out.s48a; source tools/device_bundle_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s48a.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
case "$gpu" in *H200*) ;; *) echo "not an H200 ($gpu): stopping"; exit 0 ;; esac
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
for r in 1 2 3; do
  LAYER_REPS=6 layer s47g dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer s47g dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done
save
torch_layer deepseek-v3 16384 120
LAYER_REPS=6 layer s47g dsv3bf.4 deepseek-v3.json 3:4 16384 --fp8-weights dequant
save
[ "${SECONDS}" -lt 200 ] || exit 0
LAYER_REPS=5 layer s47g k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 layer s47g k3kdabf.1 kimi-k3.json 1:2 16384 --fp8-weights dequant
torch_layer kimi-k3-kda 16384 200
LAYER_REPS=5 layer s47g k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
save
