#!/usr/bin/env bash
# Session 28, call D: bundle s28d = s28b + the consumers' scales loaded one k-step ahead (every TMA kernel variant);
# s28b and s28a inside as baselines. Fp8 suites on s28d; the fp8 bench at T = 16384 (s28d, s28b, s28d, s28b);
# DeepSeek-V3 FP8 + --fp8-attention layers: s28d against s28a, alternated, 3 rounds; GLM-5.3 FP8 16K, 2 rounds.
set -uo pipefail
NAME=s28d; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 240 $P/bin/cuda_kernels_test --gtest_filter='Fp8TmaTest.*:Fp8Test.*' > $O/conf.log 2>&1
echo "Fp8 tests rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED"
grep -E "^\[  FAILED|Failure" $O/conf.log | head -8
bench() {  # bundle round
  PENSTOCK_FP8_BENCH_T=16384 timeout 120 /tmp/s/$1/bin/penstock_bench_kernels --only fp8 > $O/fp8.$1.$2.jsonl 2>&1
  echo "== $1 round $2 rc $? at ${SECONDS}s"
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench') == 'fp8_grouped_gemm' and r.get('variant') not in ('wgmma', 'cuda_core', 'bf16_grouped_gemm') or r.get('shape','').startswith('o ') and r.get('variant','').startswith('wgmma_tma'):
            print(f\"  {r['bench'][:16]:16s} {r.get('variant'):18s} {r.get('shape','')[:26]:26s}: {r.get('time_us',0)/1000:.3f} ms {r.get('tflops',0):.0f}\")
" $O/fp8.$1.$2.jsonl
}
bench s28d 1; bench s28b 1; bench s28d 2; bench s28b 2
layer() {  # bundle tag cfg layers extra...
  local b=$1 tag=$2 cfg=$3 lay=$4; shift 4
  timeout 120 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay --tokens 16384 --reps 8 \
    --fp8-weights native --breakdown "$@" --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $?: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (down {b.get('layer.moe.experts.down', 0):.2f}, gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f})\")" $O/$tag.$b.json 2>/dev/null)"
}
for round in 1 2 3; do
  for b in s28d s28a; do layer $b dsv3.$round deepseek-v3.json 3:4 --fp8-attention; done
done
for round in 1 2; do
  for b in s28d s28a; do layer $b glm.$round glm-5.3.json 6:7 --dsa-fp8-indexer; done
done
cd $O && tar czf ${OUT:-/tmp}/s28d.tgz *.log *.json *.jsonl
