#!/usr/bin/env bash
# Session 47, call G (any GPU): bundle s47g = 1598b8f + the FP8 attention kernel's exp_fma as a template parameter
# (one exponential body in the hot loop instead of a runtime switch over four), beside s47d (1598b8f's code).
# Call E's split patch slowed even its unsplit path by ~2.7 ms (attention scope 15.8-16.1 vs 13.1 ms): the question is
# whether the kernel's code size matters. Conformance first (every Fp8AttentionTest case; the wgmma runs cycle through
# EXP_FMA 4 / 0 / 6 / 8), then the DeepSeek-V3 FP8 layer at 16K interleaved, then the attention bench's FP8 rows.
set -uo pipefail
NAME=s47g; O=/tmp/out.s47g; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s47g.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_attention_cudnn_test" 'Fp8AttentionTest.*' 170 || { save; grep -E "FAIL" "$O/conf.log" | head; exit 0; }
save
for r in 1 2 3; do for b in s47g s47d; do
  LAYER_REPS=6 layer $b dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done; done
save
[ "${SECONDS}" -lt 200 ] || exit 0
timeout 90 "$P/bin/penstock_bench_kernels" --only attention > "$O/attn.jsonl" 2>&1
echo "attention bench rc $? at ${SECONDS}s"
python3 -c "
import json
for l in open('$O/attn.jsonl'):
    if not l.startswith('{'): continue
    r = json.loads(l)
    if str(r.get('impl', '')).startswith('wgmma_fp8') and r.get('shape') == 'dsv3_mha_h128': print(r.get('seq'), r.get('impl'), round(r.get('tflops', 0), 1))"
save
