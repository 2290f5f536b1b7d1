#!/usr/bin/env bash
# Session 29, call B: bundle s29b = s29a with the work item's fields broadcast from lane 0 (warp-uniform); s28h inside
# as the baseline. The attention conformance tests (cuda_attention_cudnn_test) on s29b; the attention kernel bench
# on both.
set -uo pipefail
NAME=s29b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 250 $P/bin/cuda_attention_cudnn_test > $O/attn_tests.log 2>&1
echo "attention tests rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/attn_tests.log | tr '\n' ' '); $(grep -c '| PASS' $O/attn_tests.log) PASS, $(grep -c '| FAIL' $O/attn_tests.log) FAIL conformance lines"
grep -E "^\[  FAILED|\| FAIL" $O/attn_tests.log | head
for b in s29b s28h; do
  timeout 150 /tmp/s/$b/bin/penstock_bench_kernels --only attention > $O/attn.$b.jsonl 2>&1
  echo "== attention bench $b rc $? at ${SECONDS}s"
done
python3 - $O/attn.s29b.jsonl $O/attn.s28h.jsonl <<'PY'
import json, sys
def load(f):
    return [json.loads(l) for l in open(f) if l.startswith('{')]
for x, y in zip(load(sys.argv[1]), load(sys.argv[2])):
    if x.get('bench') != 'attention' or x.get('tflops', 0) < 50: continue
    print(f"{x.get('shape','')!s:22.22s} {x.get('seq')} {x.get('impl','')!s:34.34s} new {x['time_us']/1000:.3f} old {y['time_us']/1000:.3f} x{y['time_us']/x['time_us']:.3f}")
PY
cd $O && tar czf ${OUT:-/tmp}/s29b.tgz *.log *.jsonl
