#!/usr/bin/env bash
# Session 47, call D (any GPU): bundle s47d = 41c8ab2 + AttentionParams::k_rope (models/mla.cc's MHA form: K's nope
# columns and V from one kv_b GEMM read as strided views, K's rope columns the latent's rope head broadcast over the
# heads and loaded by the bf16 attention kernel from a tensor map of its own; no per-head K written), beside s47c
# (41c8ab2's code by default). Conformance first (AttentionCudnnTest: the bf16 kernel's k_rope cases, the dispatcher's
# concatenation fallback, cuDNN's decline), then the DeepSeek-V3 and Kimi K3 MLA bf16 layers at 16K interleaved, then
# torch.compile's DeepSeek-V3 layer.
set -uo pipefail
NAME=s47d; O=/tmp/out.s47d; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s47d.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_attention_cudnn_test" 'AttentionCudnnTest.*' 240 || { save; grep -E "FAIL" "$O/conf.log" | head; exit 0; }
grep -E "^\[conf\] attention_(bf16|cudnn) \| cases" "$O/conf.log"; grep -c "| PASS" "$O/conf.log"
save
for r in 1 2 3; do for b in s47d s47c; do
  LAYER_REPS=6 layer $b dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
done; done
save
for b in s47d s47c; do LAYER_REPS=5 layer $b k3mlabf.1 kimi-k3.json 3:4 16384 --fp8-weights dequant; done
save
[ "${SECONDS}" -lt 330 ] || exit 0
torch_layer deepseek-v3 16384 120
for b in s47d s47c; do LAYER_REPS=6 layer $b dsv3bf.4 deepseek-v3.json 3:4 16384 --fp8-weights dequant; done
save
