#!/usr/bin/env bash
# Session 48, call D (an H200, needs_h200: torch's Kimi K3 KDA composition does not fit an 80 GB H100): bundle s48d = this session's final code (the FP8
# attention's exponentials into P's fragments, 6 of 16 column blocks on the FMA pipes in f16x2; session 47's k_rope and
# exp_fma template). Conformance first (Fp8AttentionTest), then the DeepSeek-V3 layer 3 at 16K, bf16 (dequant) and
# native FP8 + --fp8-attention, interleaved, around torch.compile's composition (tools/torch_layer_baseline.py) in the
# same call; Kimi K3 layer 1 (KDA + MoE) native FP8 around torch.compile + fla chunk_kda; then the attention bench's
# rows on this GPU. Carry build-dev-lead/s48d.tar.xz and .whl.
set -uo pipefail
NAME=s48d; O=/tmp/out.s48d; source tools/device_bundle_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s48d.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_attention_cudnn_test" 'Fp8AttentionTest.*' 200 || { save; grep -E "FAIL" "$O/conf.log" | head; exit 0; }
save
for r in 1 2 3; do
  LAYER_REPS=6 layer s48d dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer s48d dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done
save
torch_layer deepseek-v3 16384 150
for r in 4 5; do
  LAYER_REPS=6 layer s48d dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer s48d dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done
save
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
LAYER_REPS=5 layer s48d k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
torch_layer kimi-k3-kda 16384 200
LAYER_REPS=5 layer s48d k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
save
[ "${SECONDS}" -lt 450 ] || exit 0
timeout 120 "$P/bin/penstock_bench_kernels" --only attention > "$O/attn.jsonl" 2>&1
echo "attention bench rc $? at ${SECONDS}s ($gpu)"
python3 -c "
import json
for l in open('$O/attn.jsonl'):
    if not l.startswith('{'): continue
    r = json.loads(l)
    i = str(r.get('impl', ''))
    if r.get('shape') == 'dsv3_mha_h128' and (i.startswith('wgmma') or i == 'cudnn_sdpa'): print(r.get('seq'), i, round(r.get('tflops', 0), 1))"
save
