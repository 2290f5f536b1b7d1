#!/usr/bin/env bash
# Session 48, call B (any GPU): bundle s48b = 4852c1d + the FP8 attention's exponentials straight into P's e4m3
# fragments (attn_wgmma::exp2_pack_e4m3) and a second FMA-pipe body, two exponentials per f16x2 instruction
# (PENSTOCK_FP8_ATTN_EXP_FMA=hN). Conformance first (every Fp8AttentionTest case; the wgmma runs rotate through the
# default, 0, 6, 8, h4, h6, h8, h12), then the attention bench's FP8 rows (expfma0/4/6/8 beside expfmah4/h6/h8/h12 in
# the same process), then the DeepSeek-V3 FP8 layer at 16K with EXP_FMA 4 (the f32 body, session 47's default) and
# the f16x2 settings, interleaved.
set -uo pipefail
NAME=s48b; O=/tmp/out.s48b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s48b.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_attention_cudnn_test" 'Fp8AttentionTest.*' 200 || { save; grep -E "FAIL" "$O/conf.log" | head; exit 0; }
grep -E "relative RMS" "$O/conf.log" | awk -F'|' '{print $2, $3}' | sed -n '1~6p' | head -16
save
timeout 120 "$P/bin/penstock_bench_kernels" --only attention > "$O/attn.jsonl" 2>&1
echo "attention bench rc $? at ${SECONDS}s"
python3 -c "
import json
for l in open('$O/attn.jsonl'):
    if not l.startswith('{'): continue
    r = json.loads(l)
    if str(r.get('impl', '')).startswith('wgmma_fp8') and r.get('shape') in ('dsv3_mha_h128', 'mla_mha_192_128'): print(r.get('shape'), r.get('seq'), r.get('impl'), round(r.get('tflops', 0), 1))"
save
for r in 1 2; do for e in 4 h6 h8 h4; do
  PENSTOCK_FP8_ATTN_EXP_FMA=$e LAYER_REPS=6 layer s48b dsv3f8.$e.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done; done
save
