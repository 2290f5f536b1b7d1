#!/usr/bin/env bash
# Session 30, call A: bundle s30a (17781ab: MLA FP8 attention's K / V by kv_b's e4m3 GEMM; the persistent FP8
# attention's item prefix from tile_util; fp8_quantize_tensor's hardware e4m3x2 cast) against s29h (10c3a03).
# Tests: cuda_attention_cudnn_test, cuda_runtime_test. Kernel bench (attention + quantisers) of both bundles, then
# DeepSeek-V3 FP8 layers alternated, and Kimi K3's MLA layer.
set -uo pipefail
NAME=s30a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for t in cuda_attention_cudnn_test cuda_runtime_test; do
  timeout 200 $P/bin/$t > $O/$t.log 2>&1
  echo "$t rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/$t.log | tr '\n' ' '); $(grep -c '| PASS' $O/$t.log) PASS, $(grep -c '| FAIL' $O/$t.log) FAIL conformance lines"
  grep -E "^\[  FAILED|\| FAIL" $O/$t.log | head -5
done
for b in s30a s29h; do
  timeout 120 /tmp/s/$b/bin/penstock_bench_kernels --only attention > $O/attn.$b.jsonl 2>&1
  echo "== attention bench $b rc $? at ${SECONDS}s"
done
python3 - $O/attn.s30a.jsonl $O/attn.s29h.jsonl <<'PY'
import json, sys
def load(f):
    return [json.loads(l) for l in open(f) if l.startswith('{')]
print("bench shape seq impl: s30a / s29h ms")
for x, y in zip(*(load(f) for f in sys.argv[1:])):
    if x.get('bench') not in ('attention', 'fp8_quantize') or 'cudnn' in x.get('impl', ''): continue
    if x.get('bench') == 'attention' and (x.get('tflops', 0) < 50 or x.get('dtype') != 'f8e4m3' and 'fp8' not in x.get('impl', '')): continue
    if x['bench'] == 'fp8_quantize':
        print(f"quant {x.get('shape','')!s:16.16s} {x.get('seq')} " + ", ".join(f"{k[:-3]} {x[k]:.3f} / {y[k]:.3f}" for k in ('q_rows_ms', 'k_blocks_ms', 'v_tensor_ms', 'k_tensor_ms')))
        continue
    print(f"attn  {x.get('shape','')!s:16.16s} {x.get('seq')} {x.get('impl','')!s:34.34s} {x['time_us']/1000:.3f} / {y['time_us']/1000:.3f}")
PY
layer() {  # bundle tag cfg layers tokens extra...
  local b=$1 tag=$2 cfg=$3 lay=$4 tok=$5; shift 5
  timeout 100 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay \
    --tokens $tok --reps 8 --breakdown "$@" --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (attention {b.get('layer.attn.core.attention', 0):.3f}, kv_expand {b.get('layer.attn.core.kv_expand', 0):.3f}, fp8_quant {b.get('layer.attn.core.fp8_quant', 0):.3f}, core {b.get('layer.attn.core', 0):.2f}, experts {b.get('layer.moe.experts', 0):.2f})\")" $O/$tag.$b.json 2>/dev/null)"
}
for round in 1 2 3; do
  for b in s30a s29h; do layer $b dsv3f8.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; done
done
for b in s30a s29h; do layer $b dsv3f8_4k deepseek-v3.json 3:4 4096 --fp8-weights native --fp8-attention; done
for b in s30a s29h; do layer $b k3mla kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention; done
cd $O && tar czf ${OUT:-/tmp}/s30a.tgz *.log *.json
