#!/usr/bin/env bash
# Session 28, call I: bundle s28i = 37b05e1 + each tile decoded once per CTA by the producer (the consumers read it
# from the stage slot); s28h (37b05e1's kernels) inside as the baseline. Fp8 suites on s28i; the fp8 bench at
# T = 16384 (s28i, s28h); FP8 layers at T = 16384, s28i against s28h alternated (DeepSeek-V3 + --fp8-attention,
# GLM-5.3, Kimi K3 KDA).
set -uo pipefail
NAME=s28i; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 200 $P/bin/cuda_kernels_test --gtest_filter='Fp8TmaTest.*:Fp8Test.*' > $O/conf.log 2>&1
echo "Fp8 tests rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED"
grep -E "^\[  FAILED|Failure" $O/conf.log | head -8
for b in s28i s28h; do
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
  for b in s28i s28h; do layer $b dsv3.$round deepseek-v3.json 3:4 "" --fp8-attention; done
  for b in s28i s28h; do layer $b glm.$round glm-5.3.json 6:7 "" --dsa-fp8-indexer; done
  for b in s28i s28h; do layer $b k3kda.$round kimi-k3.json 1:2 ""; done
done
cd $O && tar czf ${OUT:-/tmp}/s28i.tgz *.log *.json *.jsonl
