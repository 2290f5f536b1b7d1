#!/usr/bin/env bash
# Session 29, call I: bundle s29i = the per-tensor FP8 quantiser (fp8_quantize_tensor: amax and cast kernels) with
# 4 packs per thread and step, every load issued before the first use; s29h (10c3a03) inside as the baseline. The FP8
# attention tests (both quantisers bit-exact) on s29i; the attention bench's fp8_quantize records on both; the
# DeepSeek-V3 FP8 + --fp8-attention layer at T = 16384, alternated.
set -uo pipefail
NAME=s29i; source tools/device_bundle_env.sh
timeout 150 $P/bin/cuda_attention_cudnn_test --gtest_filter='Fp8AttentionTest.*' > $O/fp8_attn_tests.log 2>&1
echo "s29i Fp8AttentionTest rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/fp8_attn_tests.log | tr '\n' ' '); $(grep -c '| PASS' $O/fp8_attn_tests.log) PASS, $(grep -c '| FAIL' $O/fp8_attn_tests.log) FAIL"
grep -E "^\[  FAILED|\| FAIL" $O/fp8_attn_tests.log | head -5
for b in s29i s29h; do
  timeout 100 /tmp/s/$b/bin/penstock_bench_kernels --only attention > $O/attn.$b.jsonl 2>&1
  echo "== $b rc $? at ${SECONDS}s"
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench') == 'fp8_quantize':
            print('  ', {k: r[k] for k in r if k in ('shape', 'seq', 'impl', 'variant', 'time_us', 'gbps', 'pct_of_copy_peak')})
" $O/attn.$b.jsonl
done
layer() {  # bundle tag
  local b=$1 tag=$2
  timeout 60 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --layers 3:4 --tokens 16384 \
    --reps 8 --breakdown --fp8-weights native --fp8-attention --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (fp8_quant {b.get('layer.attn.core.fp8_quant', 0):.3f}, attention {b.get('layer.attn.core.attention', 0):.3f})\")" $O/$tag.$b.json 2>/dev/null)"
}
for round in 1 2; do for b in s29i s29h; do layer $b dsv3f8.$round; done; done
cd $O && tar czf ${OUT:-/tmp}/s29i.tgz *.log *.json *.jsonl
