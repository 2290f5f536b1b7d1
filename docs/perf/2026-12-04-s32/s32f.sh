#!/usr/bin/env bash
# Session 32, call F: bundle s32e (cuda::rope on bf16 rows in 16-byte chunks, rope_bf16x8_kernel) against s31g
# (984e7cf). Tests: ElementwiseOpTest (cuda_kernels_test; the rope cases against the reference) and the FP8 q
# quantiser's fused RoPE against cuda::rope bit for bit (cuda_attention_cudnn_test). The copy bench with the new
# rope_mla_q records, then DeepSeek-V3's bf16 layer at 16K (rope scope) alternated, and Kimi K3's MLA layer.
set -uo pipefail
NAME=s32e; O=/tmp/out.s32e; source tools/device_bundle_env.sh
timeout 200 $P/bin/cuda_kernels_test --gtest_filter='ElementwiseOpTest.*' > $O/elementwise_test.log 2>&1
echo "elementwise rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/elementwise_test.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $O/elementwise_test.log | head -5
timeout 200 $P/bin/cuda_attention_cudnn_test --gtest_filter='*Rope*' > $O/fp8_rope_test.log 2>&1
echo "fp8 rope rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/fp8_rope_test.log | tr '\n' ' '); $(grep -c '| PASS' $O/fp8_rope_test.log) PASS, $(grep -c '| FAIL' $O/fp8_rope_test.log) FAIL conformance lines"
timeout 120 $P/bin/penstock_bench_kernels --only copy > $O/copy.s32e.jsonl 2>&1
echo "copy bench rc $? at ${SECONDS}s"
python3 - $O/copy.s32e.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r = json.loads(l)
    print(r.get('bench'), r.get('mib', ''), r.get('heads', ''), r.get('interleaved', ''), f"{r.get('median_ms', 0):.4f} ms", f"{r.get('gbps', r.get('gb_per_s', 0))}")
PY
for round in 1 2; do
  for b in s32e s31g; do layer $b dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant; done
done
for b in s32e s31g; do layer $b k3mlabf kimi-k3.json 3:4 16384 --fp8-weights dequant; done
for f in $O/dsv3bf.*.json $O/k3mlabf.*.json; do python3 -c "
import json,sys; r=json.load(open(sys.argv[1]))[0]; b={x['scope']:x['median_ms'] for x in r['breakdown']}
print(sys.argv[1].split('/')[-1], 'rope', round(b.get('layer.attn.rope',0),3), 'layer', round(r['median_ms'],2))" $f; done
cd $O && tar czf ${OUT:-/tmp}/s32f.tgz *.log *.json *.jsonl
