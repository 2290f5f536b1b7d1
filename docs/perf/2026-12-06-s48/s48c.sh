#!/usr/bin/env bash
# Session 48, call C (any GPU): bundle s48c = s48b + the default FMA-pipe exponentials h6 (f16x2, 6 of 16 column
# blocks) + a row's running max kept while a tile's max exceeds it by at most a slack (PENSTOCK_FP8_ATTN_MAX_SLACK for
# the FP8 kernel, <= 0.8 so that P * 2^8 stays in e4m3's range; PENSTOCK_ATTN_MAX_SLACK for the bf16 kernel), so that
# O's rescale runs only when the max grows by more. Conformance first (Fp8AttentionTest: odd cases with slack 0.75;
# AttentionCudnnTest: the bf16 kernel's no-lse pass with slack 8, the no-ping-pong pass with 0), then the attention
# bench (slack rows beside slack 0 in the same process), then the DeepSeek-V3 layer at 16K, FP8 and bf16, slack 0 vs
# on, interleaved.
set -uo pipefail
NAME=s48c; O=/tmp/out.s48c; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s48c.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_attention_cudnn_test" 'Fp8AttentionTest.*:AttentionCudnnTest.*' 300 || { save; grep -E "FAIL" "$O/conf.log" | head; exit 0; }
save
timeout 150 "$P/bin/penstock_bench_kernels" --only attention > "$O/attn.jsonl" 2>&1
echo "attention bench rc $? at ${SECONDS}s"
python3 -c "
import json
for l in open('$O/attn.jsonl'):
    if not l.startswith('{'): continue
    r = json.loads(l)
    i = str(r.get('impl', ''))
    if i.startswith('wgmma') and ('slack' in i or i.endswith('no_lse') or 'cudnn_sdpa' == i) and r.get('shape') in ('dsv3_mha_h128', 'mla_mha_192_128', 'mha_d128'): print(r.get('shape'), r.get('seq'), i, round(r.get('tflops', 0), 1))"
save
for r in 1 2 3; do
  for s in 0 0.75; do
    PENSTOCK_FP8_ATTN_MAX_SLACK=$s LAYER_REPS=6 layer s48c dsv3f8.s$s.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  done
  for s in 0 8; do
    PENSTOCK_ATTN_MAX_SLACK=$s LAYER_REPS=6 layer s48c dsv3bf.s$s.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
  done
done
save
