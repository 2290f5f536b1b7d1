#!/usr/bin/env bash
# Session 31, call E: bundle s31g (s31f + the bf16 attention kernel's P in two register sets) against s31f. Tests:
# cuda_attention_cudnn_test on s31g (the bf16 wgmma kernel's cases with and without the ping-pong, and the FP8 ones).
# The attention kernel bench of both twice, alternated (the bf16 wgmma records), then the DeepSeek-V3 layer with bf16
# weights alternated and Kimi K3's MLA layer with bf16 weights.
set -uo pipefail
NAME=s31g; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
for t in cuda_attention_cudnn_test; do
  timeout 260 $P/bin/$t > $O/$t.log 2>&1
  echo "$t rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/$t.log | tr '\n' ' '); $(grep -c '| PASS' $O/$t.log) PASS, $(grep -c '| FAIL' $O/$t.log) FAIL conformance lines"
  grep -E "^\[  FAILED|\| FAIL" $O/$t.log | head -8
done
B="s31g s31f"
for r in 1 2; do for b in $B; do
  timeout 150 /tmp/s/$b/bin/penstock_bench_kernels --only attention > $O/attn.$b.$r.jsonl 2>&1
  echo "== attention bench $b round $r rc $? at ${SECONDS}s"
done; done
python3 - $O/attn.s31g.1.jsonl $O/attn.s31f.1.jsonl $O/attn.s31g.2.jsonl $O/attn.s31f.2.jsonl <<'PY'
import json, sys
def load(f):
    return [json.loads(l) for l in open(f) if l.startswith('{')]
runs = [load(f) for f in sys.argv[1:]]
def key(r): return (r.get('bench'), r.get('shape'), r.get('impl'), r.get('seq'))
maps = [{key(r): r for r in x} for x in runs[1:]]
print("columns: s31g / s31f / s31g / s31f (TFLOP/s)")
for x in runs[0]:
    ys = [m.get(key(x), {}) for m in maps]
    if x.get('bench') == 'attention' and (str(x.get('impl')).startswith('wgmma_bf16') or x.get('impl') in ('cudnn_sdpa', 'wgmma_fp8')):
        print(f"attn {x.get('shape')!s:18.18s} {x.get('seq')!s:6s} {x.get('impl')!s:32.32s} " + " / ".join(f"{r.get('tflops', 0):6.1f}" for r in [x] + ys))
PY
layer() {  # bundle tag cfg layers tokens extra...
  local b=$1 tag=$2 cfg=$3 lay=$4 tok=$5; shift 5
  timeout 100 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay \
    --tokens $tok --reps 8 --breakdown "$@" --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (min {r['min_ms']:.2f}; attention {b.get('layer.attn.core.attention', 0):.3f}, core {b.get('layer.attn.core', 0):.2f}, experts {b.get('layer.moe.experts', 0):.2f}, {r.get('energy_j_per_rep', 0):.1f} J)\")" $O/$tag.$b.json 2>/dev/null)"
}
for round in 1 2 3; do
  for b in $B; do layer $b dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant; done
done
for b in $B; do layer $b dsv3bf_4k deepseek-v3.json 3:4 4096 --fp8-weights dequant; done
for b in $B; do layer $b k3mlabf kimi-k3.json 3:4 16384 --fp8-weights dequant; done
cd $O && tar czf ${OUT:-/tmp}/s31e.tgz *.log *.json *.jsonl
