#!/usr/bin/env bash
# Session 27, call B: the FP8 grouped GEMM on m64n64 chains (s27b) against the m64n128 chains (s27a's kernel bench,
# s26f's model bench: the same FP8 kernel code as HEAD 3b0d476): FP8 conformance, the fp8 kernel bench alternated,
# the DeepSeek-V3 FP8 layer and the GLM-5.3 FP8 layer at 16K alternated.
set -uo pipefail
# build-dev-lead/s27b.tar.xz holds the three bundles s27b, s27a and s26f
NAME=s27b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='Fp8TmaTest.*:Fp8Test.*' > $O/conf.log 2>&1
rc=$?
echo "Fp8 tests rc $rc at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED, $(grep -c '| PASS' $O/conf.log) PASS lines"
grep -E "^\[  FAILED|\| FAIL|Failure" $O/conf.log | head -8
fp8sum() {
python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench') == 'fp8_grouped_gemm' or (r.get('bench') == 'fp8_gemm' and 'tma' in r.get('variant', '')):
            print(f\"  {sys.argv[2]} {r['bench'][:16]:16s} {r.get('variant'):12s} {r.get('shape','')[:26]:26s} T{r.get('tokens')}: {r.get('time_us',0)/1000:.3f} ms {r.get('tflops',0):.0f}\")
" $1 $2
}
for round in 1 2; do
  for b in s27b s27a; do
    timeout 90 /tmp/s/$b/bin/penstock_bench_kernels --only fp8 > $O/fp8.$b.$round.jsonl 2>&1
    echo "fp8 bench $b $round rc $? at ${SECONDS}s"; fp8sum $O/fp8.$b.$round.jsonl $b
  done
done
layer() {  # bundle tag cfg layers tokens extra...
  local b=$1 tag=$2 cfg=$3 lay=$4 tok=$5; shift 5
  timeout 90 /tmp/s/$b/bin/penstock_model_bench --config /tmp/s/$b/configs/$cfg --layers $lay --tokens $tok --reps 8 \
    --fp8-weights native --breakdown "$@" --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $?: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (down {b.get('layer.moe.experts.down', 0):.2f}, gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f}, shared {b.get('layer.moe.shared', 0):.2f})\")" $O/$tag.$b.json 2>/dev/null)"
}
if [ $rc -eq 0 ]; then
  for round in 1 2 3; do
    for b in s27b s26f; do layer $b dsv3.$round deepseek-v3.json 3:4 16384 --fp8-attention; done
  done
  for round in 1 2; do
    for b in s27b s26f; do layer $b glm16k.$round glm-5.3.json 6:7 16384 --dsa-fp8-indexer; done
  done
fi
cd $O && tar czf ${OUT:-/tmp}/s27b.tgz *
