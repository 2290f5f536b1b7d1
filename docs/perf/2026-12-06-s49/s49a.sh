#!/usr/bin/env bash
# Session 49, call A (any GPU): bundle s49a = 66b768d + the lazy running max in both attention kernels (FP8: session
# 48's lazy_max.patch, PENSTOCK_FP8_ATTN_MAX_SLACK, default 0.75; bf16: the same in score units,
# PENSTOCK_ATTN_MAX_SLACK, default 8 in log2 units) beside s48d (3c2bee9's code = 66b768d's). Conformance first
# (Fp8AttentionTest: odd cases at slack 0; the bf16 kernel's cases, with a slack-0 pass), then the DeepSeek-V3 layer at
# 16K, FP8 and bf16, s49a and s48d interleaved, then the attention kernel bench (its _slack0 rows in the same process).
set -uo pipefail
NAME=s49a; O=/tmp/out.s49a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s49a.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_attention_cudnn_test" 'Fp8AttentionTest.*:AttentionCudnnTest.Bf16Wgmma*' 250 || { save; grep -E "FAIL" "$O/conf.log" | head; exit 0; }
save
for r in 1 2 3; do for b in s49a s48d; do
  LAYER_REPS=6 layer $b dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  LAYER_REPS=6 layer $b dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
done; done
save
timeout 150 "$P/bin/penstock_bench_kernels" --only attention > "$O/attn.jsonl" 2>&1
echo "attention bench rc $? at ${SECONDS}s"
python3 -c "
import json
for l in open('$O/attn.jsonl'):
    if not l.startswith('{'): continue
    r = json.loads(l)
    if str(r.get('impl', '')).startswith('wgmma') and r.get('shape') in ('dsv3_mha_h128', 'mla_mha_192_128'): print(r.get('shape'), r.get('seq'), r.get('impl'), round(r.get('tflops', 0), 1))"
save
