#!/usr/bin/env bash
# Session 28, call G: bundle s28g = the session's final kernel code (d3d952c + the pipelined promotion for 128-wide
# tiles, descriptors by increment, the warp-uniform warpgroup index in the gated and single-CTA kernels); s28a =
# d3d952c inside as the baseline. The whole cuda_kernels_test and cuda_runtime_test on s28g; the fp8 bench at
# T = 16384 (s28g, s28a); FP8 layers at T = 16384, s28g against s28a alternated (DeepSeek-V3 + --fp8-attention with
# PENSTOCK_FP8_PAIR unset and =glu, GLM-5.3, Kimi K3 KDA).
set -uo pipefail
NAME=s28g; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 300 $P/bin/cuda_kernels_test > $O/kernels.log 2>&1
echo "cuda_kernels_test rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/kernels.log | tr '\n' ' '); $(grep -c '| PASS' $O/kernels.log) PASS, $(grep -c '| FAIL' $O/kernels.log) FAIL conformance lines"
grep -E "^\[  FAILED|\| FAIL" $O/kernels.log | head
timeout 120 $P/bin/cuda_runtime_test > $O/runtime.log 2>&1
echo "cuda_runtime_test rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/runtime.log | tr '\n' ' ')"
for b in s28g s28a; do
  PENSTOCK_FP8_BENCH_T=16384 timeout 60 /tmp/s/$b/bin/penstock_bench_kernels --only fp8 > $O/fp8.$b.jsonl 2>&1
  echo "== fp8 bench $b rc $? at ${SECONDS}s"
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench') == 'fp8_grouped_gemm' and r.get('variant') not in ('wgmma', 'cuda_core', 'bf16_grouped_gemm'):
            print(f\"  {r.get('variant'):18s} {r.get('shape','')[:26]:26s}: {r.get('time_us',0)/1000:.3f} ms {r.get('tflops',0):.0f}\")
" $O/fp8.$b.jsonl
done
layer() {  # bundle tag cfg layers pairmode extra...
  local b=$1 tag=$2 cfg=$3 lay=$4 pm=$5; shift 5
  env ${pm:+PENSTOCK_FP8_PAIR=$pm} timeout 100 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay \
    --tokens 16384 --reps 8 --fp8-weights native --breakdown "$@" --json $O/$tag.$b$pm.json > $O/$tag.$b$pm.log 2>&1
  echo "$tag $b ${pm:+pair=$pm }rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (down {b.get('layer.moe.experts.down', 0):.2f}, gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f})\")" $O/$tag.$b$pm.json 2>/dev/null)"
}
for round in 1 2; do
  layer s28g dsv3.$round deepseek-v3.json 3:4 "" --fp8-attention
  layer s28a dsv3.$round deepseek-v3.json 3:4 "" --fp8-attention
  layer s28g dsv3.$round deepseek-v3.json 3:4 glu --fp8-attention
done
for round in 1 2; do
  for b in s28g s28a; do layer $b glm.$round glm-5.3.json 6:7 "" --dsa-fp8-indexer; done
done
for round in 1 2; do
  for b in s28g s28a; do layer $b k3kda.$round kimi-k3.json 1:2 ""; done
done
cd $O && tar czf ${OUT:-/tmp}/s28g.tgz *.log *.json *.jsonl
