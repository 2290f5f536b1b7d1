#!/usr/bin/env bash
# Session 47, call E (any GPU): bundle s47e = 1598b8f + the FP8 attention's score products in two 64-key halves
# (PENSTOCK_FP8_ATTN_SPLIT=1: two wgmma groups; the first half's row max runs while the tensor cores compute the
# second, on the tiles that need no mask). Conformance first (Fp8AttentionTest's wgmma cases, the split runs checked
# bit for bit against the whole-tile ones; the bf16 kernel's cases: tile_row_max was refactored), then the
# DeepSeek-V3 FP8 layer at 16K (native FP8 + --fp8-attention) SPLIT=1 / 0 interleaved, Kimi K3's MLA FP8 layer, and
# the attention kernel bench with each setting.
set -uo pipefail
NAME=s47e; O=/tmp/out.s47e; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s47e.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_attention_cudnn_test" 'Fp8AttentionTest.WgmmaKernel*:AttentionCudnnTest.Bf16Wgmma*' 200 || { save; grep -E "FAIL" "$O/conf.log" | head; exit 0; }
grep -c "split == whole-tile bytes | PASS" "$O/conf.log"
save
for r in 1 2 3; do for sp in 1 0; do
  PENSTOCK_FP8_ATTN_SPLIT=$sp LAYER_REPS=6 layer s47e dsv3f8.sp$sp.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done; done
save
for sp in 1 0; do
  PENSTOCK_FP8_ATTN_SPLIT=$sp LAYER_REPS=5 layer s47e k3mlaf8.sp$sp kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention
done
save
[ "${SECONDS}" -lt 300 ] || exit 0
for sp in 1 0; do
  PENSTOCK_FP8_ATTN_SPLIT=$sp timeout 100 "$P/bin/penstock_bench_kernels" --only attention > "$O/attn.sp$sp.jsonl" 2>&1
  echo "attention bench split=$sp rc $? at ${SECONDS}s"
  python3 -c "
import json
for l in open('$O/attn.sp$sp.jsonl'):
    if not l.startswith('{'): continue
    r = json.loads(l)
    if str(r.get('impl', '')).startswith('wgmma_fp8'): print('split $sp', r.get('shape'), r.get('seq'), r.get('impl'), round(r.get('tflops', 0), 1))"
  save
done
