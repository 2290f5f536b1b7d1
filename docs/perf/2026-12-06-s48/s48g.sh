#!/usr/bin/env bash
# Session 48, call G (an H200, needs_h200: torch's Kimi K3 KDA composition does not fit an 80 GB H100): bundle s48f
# (3c2bee9 + the FP8 softmax's lazy max) with s48d (3c2bee9) beside it. The H200 goal rows with this session's code:
# conformance first, then the DeepSeek-V3 layer 3 at 16K, bf16 (dequant) and native FP8 + --fp8-attention (s48f and
# s48d interleaved), around torch.compile's composition in the same call; then Kimi K3 layer 1 (KDA + MoE) native FP8
# around torch.compile + fla chunk_kda. Carry build-dev-lead/s48f.tar.xz and .whl.
set -uo pipefail
NAME=s48f; O=/tmp/out.s48g; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s48g.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_attention_cudnn_test" 'Fp8AttentionTest.*:AttentionCudnnTest.Bf16Wgmma*' 250 || { save; grep -E "FAIL" "$O/conf.log" | head; exit 0; }
save
for r in 1 2 3; do
  LAYER_REPS=6 layer s48f dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer s48f dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  LAYER_REPS=6 layer s48d dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done
save
torch_layer deepseek-v3 16384 150
for r in 4 5; do
  LAYER_REPS=6 layer s48f dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer s48f dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  LAYER_REPS=6 layer s48d dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done
save
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
LAYER_REPS=5 layer s48f k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
torch_layer kimi-k3-kda 16384 200
LAYER_REPS=5 layer s48f k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
save
