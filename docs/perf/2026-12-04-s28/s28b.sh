#!/usr/bin/env bash
# Session 28, call B: bundle s28b = d3d952c + the pipelined promotion for 128-wide tiles (two k-steps per iteration,
# two block register sets) + kWgmmaTmaPair128 (128-wide tiles on CTA pairs, the weight tile's halves multicast);
# s28a = d3d952c. Fp8 suites on s28b; the fp8 bench at T = 16384 (s28b, s28a, s28b); DeepSeek-V3 FP8 layer with kAuto
# (down on the 256-wide pair kernel) against PENSTOCK_FP8_TILE_N=128 (down on the 128-wide pair kernel), alternated.
set -uo pipefail
NAME=s28b; source tools/device_bundle_env.sh   # the tarball holds s28b and s28a
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 240 $P/bin/cuda_kernels_test --gtest_filter='Fp8TmaTest.*:Fp8Test.*' > $O/conf.log 2>&1
echo "Fp8 tests rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED"
grep -E "^\[  FAILED|Failure|not taken" $O/conf.log | head -8
bench() {  # bundle round
  PENSTOCK_FP8_BENCH_T=16384 timeout 120 /tmp/s/$1/bin/penstock_bench_kernels --only fp8 > $O/fp8.$1.$2.jsonl 2>&1
  echo "== $1 round $2 rc $? at ${SECONDS}s"
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench') in ('fp8_grouped_gemm', 'fp8_gemm') and r.get('variant') not in ('wgmma', 'cuda_core'):
            print(f\"  {r['bench'][:16]:16s} {r.get('variant'):18s} {r.get('shape','')[:26]:26s}: {r.get('time_us',0)/1000:.3f} ms {r.get('tflops',0):.0f}\")
" $O/fp8.$1.$2.jsonl
}
bench s28b 1; bench s28a 1; bench s28b 2
layer() {  # tilen tag
  env ${1:+PENSTOCK_FP8_TILE_N=$1} timeout 120 $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --layers 3:4 \
    --tokens 16384 --reps 8 --fp8-weights native --fp8-attention --breakdown --json $O/$2.json > $O/$2.log 2>&1
  echo "$2 tile_n=${1:-auto} rc $?: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (down {b.get('layer.moe.experts.down', 0):.2f}, gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f})\")" $O/$2.json 2>/dev/null)"
}
for round in 1 2 3; do layer "" dsv3.auto.$round; layer 128 dsv3.n128.$round; done
cd $O && tar czf ${OUT:-/tmp}/s28b.tgz *
