#!/usr/bin/env bash
# Session 30, call F: bundle s30f (the fused RoPE with 16-byte accesses) against s30e (row_quant_kernel)
# and s29h (10c3a03). Tests: cuda_attention_cudnn_test, cuda_runtime_test. The quantiser records of the
# kernel bench, then the DeepSeek-V3 FP8 layer alternated and Kimi K3's MLA layer.
set -uo pipefail
NAME=s30f; source tools/device_bundle_env.sh
for t in cuda_attention_cudnn_test cuda_runtime_test; do
  timeout 260 $P/bin/$t > $O/$t.log 2>&1
  echo "$t rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/$t.log | tr '\n' ' '); $(grep -c '| PASS' $O/$t.log) PASS, $(grep -c '| FAIL' $O/$t.log) FAIL conformance lines"
  grep -E "^\[  FAILED|\| FAIL" $O/$t.log | head -8
done
grep -E 'fp8_quantize_heads_rope|special' $O/cuda_attention_cudnn_test.log | head -30
for b in s30f s30e; do
  timeout 100 /tmp/s/$b/bin/penstock_bench_kernels --only attention > $O/attn.$b.jsonl 2>&1
  echo "== attention bench $b rc $? at ${SECONDS}s"
done
python3 - $O/attn.s30f.jsonl $O/attn.s30e.jsonl <<'PY'
import json, sys
def load(f):
    return [json.loads(l) for l in open(f) if l.startswith('{')]
a, b = (load(f) for f in sys.argv[1:])
for x in a:
    if x.get('bench') != 'fp8_quantize': continue
    y = next((r for r in b if r.get('bench') == 'fp8_quantize' and r.get('shape') == x.get('shape') and r.get('seq') == x.get('seq')), {})
    print(f"{x.get('shape')!s:16.16s} {x.get('seq')} " + ", ".join(f"{k[:-3]} {x.get(k, 0):.3f} / {y.get(k, 0):.3f}" for k in ('q_rows_ms', 'q_rope_ms', 'q_rows_rope_ms', 'k_blocks_ms', 'v_tensor_ms')))
PY
layer() {  # bundle tag cfg layers tokens extra...
  local b=$1 tag=$2 cfg=$3 lay=$4 tok=$5; shift 5
  timeout 100 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay \
    --tokens $tok --reps 8 --breakdown "$@" --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (attention {b.get('layer.attn.core.attention', 0):.3f}, rope {b.get('layer.attn.rope', 0):.3f}, kv_expand {b.get('layer.attn.core.kv_expand', 0):.3f}, fp8_quant {b.get('layer.attn.core.fp8_quant', 0):.3f}, core {b.get('layer.attn.core', 0):.2f}, experts {b.get('layer.moe.experts', 0):.2f})\")" $O/$tag.$b.json 2>/dev/null)"
}
for round in 1 2 3; do
  for b in s30f s30e s29h; do layer $b dsv3f8.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; done
done
for b in s30f s29h; do layer $b dsv3f8_4k deepseek-v3.json 3:4 4096 --fp8-weights native --fp8-attention; done
for b in s30f s29h; do layer $b k3mla kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention; done
cd $O && tar czf ${OUT:-/tmp}/s30f.tgz *.log *.json
