#!/usr/bin/env bash
# Session 29, call F: bundle s29f = the persistent FP8 attention kernel with the items' tiles as one stream (an
# item's first scores issued beside the previous item's last value product); s29d (persistent, an item at a time)
# and s28h (d434f62's per-CTA kernels) inside. Attention tests on s29f; the attention bench on all three; DeepSeek-V3
# FP8 + --fp8-attention layers at T = 16384 and 4096 and Kimi K3's MLA layer at 16384, s29f against s28h alternated.
set -uo pipefail
NAME=s29f; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 200 $P/bin/cuda_attention_cudnn_test > $O/attn_tests.log 2>&1
echo "s29f attention tests rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/attn_tests.log | tr '\n' ' '); $(grep -c '| PASS' $O/attn_tests.log) PASS, $(grep -c '| FAIL' $O/attn_tests.log) FAIL"
grep -E "^\[  FAILED|\| FAIL" $O/attn_tests.log | head -5
for b in s29f s29d s28h; do
  timeout 150 /tmp/s/$b/bin/penstock_bench_kernels --only attention > $O/attn.$b.jsonl 2>&1
  echo "== attention bench $b rc $? at ${SECONDS}s"
done
python3 - $O/attn.s29f.jsonl $O/attn.s29d.jsonl $O/attn.s28h.jsonl <<'PY'
import json, sys
def load(f):
    return [json.loads(l) for l in open(f) if l.startswith('{')]
print("shape seq impl: s29f (stream) / s29d (persistent) / s28h ms")
for x, y, z in zip(*(load(f) for f in sys.argv[1:])):
    if x.get('bench') != 'attention' or x.get('tflops', 0) < 50 or 'fp8' not in x.get('impl', '') or 'cudnn' in x.get('impl', ''): continue
    print(f"{x.get('shape','')!s:16.16s} {x.get('seq')} {x.get('impl','')!s:34.34s} {x['time_us']/1000:.3f} / {y['time_us']/1000:.3f} / {z['time_us']/1000:.3f}  ({x.get('tflops',0):.0f} / {z.get('tflops',0):.0f})")
PY
layer() {  # bundle tag cfg layers tokens extra...
  local b=$1 tag=$2 cfg=$3 lay=$4 tok=$5; shift 5
  timeout 100 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay \
    --tokens $tok --reps 8 --breakdown "$@" --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (attention {b.get('layer.attn.core.attention', 0):.3f}, core {b.get('layer.attn.core', 0):.2f}, experts {b.get('layer.moe.experts', 0):.2f})\")" $O/$tag.$b.json 2>/dev/null)"
}
for round in 1 2; do
  for b in s29f s28h; do layer $b dsv3f8.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; done
done
for round in 1 2; do
  for b in s29f s28h; do layer $b dsv3f8_4k.$round deepseek-v3.json 3:4 4096 --fp8-weights native --fp8-attention; done
done
for b in s29f s28h; do layer $b k3mla kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention; done
cd $O && tar czf ${OUT:-/tmp}/s29f.tgz *.log *.json *.jsonl
