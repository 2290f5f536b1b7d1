#!/usr/bin/env bash
# Session 32, call G: bundle s32g (rope_bf16x8_kernel with four passes' chunks loaded before any is rotated) against
# s32e (one pass at a time). Tests as call F on s32g; the copy bench (rope_mla_q records) of both twice, alternated;
# DeepSeek-V3's bf16 layer at 16K once each (the rope scope).
set -uo pipefail
NAME=s32g; O=/tmp/out.s32g; source tools/device_bundle_env.sh
timeout 200 $P/bin/cuda_kernels_test --gtest_filter='ElementwiseOpTest.*' > $O/elementwise_test.log 2>&1
echo "elementwise rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/elementwise_test.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $O/elementwise_test.log | head -5
timeout 200 $P/bin/cuda_attention_cudnn_test --gtest_filter='*Rope*' > $O/fp8_rope_test.log 2>&1
echo "fp8 rope rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/fp8_rope_test.log | tr '\n' ' '); $(grep -c '| PASS' $O/fp8_rope_test.log) PASS, $(grep -c '| FAIL' $O/fp8_rope_test.log) FAIL conformance lines"
for r in 1 2; do for b in s32g s32e; do
  timeout 120 /tmp/s/$b/bin/penstock_bench_kernels --only copy > $O/copy.$b.$r.jsonl 2>&1
  python3 - $O/copy.$b.$r.jsonl $b $r <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    x = json.loads(l)
    if x.get('bench') in ('rope_mla_q', 'copy_d2d') and x.get('mib', 256) == 256:
        print(sys.argv[2], sys.argv[3], x.get('bench'), x.get('heads', ''), x.get('interleaved', ''),
              f"{x['time_us']:.1f} us {x['gbps']:.0f} GB/s {x.get('pct_of_copy_peak', 0):.1f}% of copy")
PY
done; done
for b in s32g s32e; do layer $b dsv3bf deepseek-v3.json 3:4 16384 --fp8-weights dequant; done
for f in $O/dsv3bf.*.json; do python3 -c "
import json,sys; r=json.load(open(sys.argv[1]))[0]; b={x['scope']:x['median_ms'] for x in r['breakdown']}
print(sys.argv[1].split('/')[-1], 'rope', round(b.get('layer.attn.rope',0),3), 'layer', round(r['median_ms'],2))" $f; done
cd $O && tar czf ${OUT:-/tmp}/s32g.tgz *.log *.json *.jsonl
