#!/usr/bin/env bash
# Session 29, call A: bundle s29a = the persistent attention kernels (bf16 and FP8 wgmma: one CTA per SM taking
# (sequence, head, query tile) items from the stream's tile counter) on d434f62; s28h (37b05e1, the same attention
# code as d434f62) inside as the baseline. The attention conformance tests on s29a; the attention kernel bench on
# both; DeepSeek-V3 layers at T = 16384 (FP8 + --fp8-attention, bf16) and 4096 (FP8), s29a against s28h alternated.
set -uo pipefail
NAME=s29a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 200 $P/bin/cuda_kernels_test --gtest_filter='Fp8AttentionTest.*:AttentionCudnnTest.*' > $O/attn_tests.log 2>&1
echo "attention tests rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/attn_tests.log | tr '\n' ' '); $(grep -c '| PASS' $O/attn_tests.log) PASS, $(grep -c '| FAIL' $O/attn_tests.log) FAIL conformance lines"
grep -E "^\[  FAILED|\| FAIL" $O/attn_tests.log | head
for b in s29a s28h; do
  timeout 150 /tmp/s/$b/bin/penstock_bench_kernels --only attention > $O/attn.$b.jsonl 2>&1
  echo "== attention bench $b rc $? at ${SECONDS}s"
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        v = r.get('variant', '')
        if 'cuda_core' in v or 'autotuned' in v: continue
        print(f\"  {r.get('bench',''):14s} {v:24s} {str(r.get('shape',''))[:34]:34s}: {r.get('time_us',0)/1000:.3f} ms {r.get('tflops',0):.0f}\")
" $O/attn.$b.jsonl
done
layer() {  # bundle tag cfg layers tokens extra...
  local b=$1 tag=$2 cfg=$3 lay=$4 tok=$5; shift 5
  timeout 100 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay \
    --tokens $tok --reps 8 --breakdown "$@" --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (attention {b.get('layer.attn.core.attention', 0):.2f}, core {b.get('layer.attn.core', 0):.2f}, experts {b.get('layer.moe.experts', 0):.2f})\")" $O/$tag.$b.json 2>/dev/null)"
}
for round in 1 2; do
  for b in s29a s28h; do layer $b dsv3f8.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; done
done
for round in 1 2; do
  for b in s29a s28h; do layer $b dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant; done
done
for b in s29a s28h; do layer $b dsv3f8_4k deepseek-v3.json 3:4 4096 --fp8-weights native --fp8-attention; done
cd $O && tar czf ${OUT:-/tmp}/s29a.tgz *.log *.json *.jsonl
