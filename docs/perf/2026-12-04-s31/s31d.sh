#!/usr/bin/env bash
# Session 31, call D (the final kernel code): bundle s31f (the FP8 attention's P in two register sets, block_quant_kernel
# for k per 128-key block, the quantisers' pack helpers taking packs by value) against s30f (session 30's final code).
# Tests: cuda_attention_cudnn_test and cuda_runtime_test on s31f. The attention kernel bench of both (quantisers and
# FP8 attention) twice, alternated, then the DeepSeek-V3 FP8 layer alternated and Kimi K3's MLA layer.
set -uo pipefail
NAME=s31f; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
for t in cuda_attention_cudnn_test cuda_runtime_test; do
  timeout 260 $P/bin/$t > $O/$t.log 2>&1
  echo "$t rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/$t.log | tr '\n' ' '); $(grep -c '| PASS' $O/$t.log) PASS, $(grep -c '| FAIL' $O/$t.log) FAIL conformance lines"
  grep -E "^\[  FAILED|\| FAIL" $O/$t.log | head -8
done
B="s31f s30f"
for r in 1 2; do for b in $B; do
  timeout 150 /tmp/s/$b/bin/penstock_bench_kernels --only attention > $O/attn.$b.$r.jsonl 2>&1
  echo "== attention bench $b round $r rc $? at ${SECONDS}s"
done; done
python3 - $O/attn.s31f.1.jsonl $O/attn.s30f.1.jsonl $O/attn.s31f.2.jsonl $O/attn.s30f.2.jsonl <<'PY'
import json, sys
def load(f):
    return [json.loads(l) for l in open(f) if l.startswith('{')]
runs = [load(f) for f in sys.argv[1:]]
def key(r): return (r.get('bench'), r.get('shape'), r.get('impl'), r.get('seq'))
maps = [{key(r): r for r in x} for x in runs[1:]]
print("columns: s31f / s30f / s31f / s30f")
for x in runs[0]:
    ys = [m.get(key(x), {}) for m in maps]
    if x.get('bench') == 'fp8_quantize':
        print(f"quant {x.get('shape')!s:16.16s} {x.get('seq')} " + ", ".join(f"{k[:-3]} " + " / ".join(f"{r.get(k, 0):.3f}" for r in [x] + ys) for k in ('q_rows_ms', 'q_rows_rope_ms', 'k_blocks_ms', 'v_tensor_ms')))
    elif x.get('bench') == 'attention' and x.get('impl') in ('wgmma_fp8', 'wgmma_fp8_bf16_out_no_lse', 'wgmma_fp8_bf16_out_no_lse_mma_probe'):
        print(f"attn {x.get('shape')!s:18.18s} {x.get('seq')!s:6s} {x.get('impl')!s:40.40s} " + " / ".join(f"{r.get('tflops', 0):6.1f}" for r in [x] + ys))
PY
layer() {  # bundle tag cfg layers tokens extra...
  local b=$1 tag=$2 cfg=$3 lay=$4 tok=$5; shift 5
  timeout 100 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay \
    --tokens $tok --reps 8 --breakdown "$@" --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (min {r['min_ms']:.2f}; attention {b.get('layer.attn.core.attention', 0):.3f}, kv_expand {b.get('layer.attn.core.kv_expand', 0):.3f}, fp8_quant {b.get('layer.attn.core.fp8_quant', 0):.3f}, core {b.get('layer.attn.core', 0):.2f}, experts {b.get('layer.moe.experts', 0):.2f}, {r.get('energy_j_per_rep', 0):.1f} J)\")" $O/$tag.$b.json 2>/dev/null)"
}
for round in 1 2 3; do
  for b in $B; do layer $b dsv3f8.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; done
done
for b in $B; do layer $b dsv3f8_4k deepseek-v3.json 3:4 4096 --fp8-weights native --fp8-attention; done
for b in $B; do layer $b k3mla kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention; done
cd $O && tar czf ${OUT:-/tmp}/s31d.tgz *.log *.json *.jsonl
