#!/usr/bin/env bash
# Session 32, call L: bundle s32l (s32k + the next head's q rows prefetched into registers during the products; the default
# indexer of GLM-5.3 without --dsa-fp8-indexer) against s32k. Tests: DsaOpTest (cuda_kernels_test; the
# tiled kernel against the reference and bit for bit against the per-element kernel, full and causal; the Perf test's
# f32 TFLOP/s). Then GLM-5.3's layer 6 at 16K with bf16 weights and the default indexer, alternated, two rounds.
set -uo pipefail
NAME=s32l; O=/tmp/out.s32l; source tools/device_bundle_env.sh
timeout 300 $P/bin/cuda_kernels_test --gtest_filter='DsaOpTest.*' > $O/dsa_test.log 2>&1
echo "DsaOpTest rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/dsa_test.log | tr '\n' ' '); $(grep -c '| PASS' $O/dsa_test.log) PASS, $(grep -c '| FAIL' $O/dsa_test.log) FAIL conformance lines"
grep -E "^\[  FAILED|\| FAIL" $O/dsa_test.log | head -8
grep -E "tiled|\[perf\] dsa_indexer_logits f32" $O/dsa_test.log | head -12
for round in 1 2; do
  for b in s32l s32k; do layer $b glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant; done
done
for f in $O/glmbf.*.json; do python3 -c "
import json,sys; r=json.load(open(sys.argv[1]))[0]; b={x['scope']:x['median_ms'] for x in r['breakdown']}
print(sys.argv[1].split('/')[-1], 'indexer', round(b.get('layer.attn.indexer',0),2), 'logits', round(b.get('layer.attn.indexer.logits',0),2), 'layer', round(r['median_ms'],2))" $f; done
cd $O && tar czf ${OUT:-/tmp}/s32l.tgz *.log *.json
