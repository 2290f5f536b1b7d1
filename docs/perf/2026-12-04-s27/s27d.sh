#!/usr/bin/env bash
# Session 27, call D: the FP8 GEMM consumers' stagger (warpgroup 1 starts each tile PENSTOCK_FP8_STAGGER k-steps behind
# warpgroup 0, so their epilogues do not coincide): FP8 conformance at stagger 2 (the default) and 3; the fp8 bench at
# 0 / 2 / 3 alternated; the DeepSeek-V3 FP8 layer (+ --fp8-attention) and GLM-5.3 FP8 layer at 16K, 0 vs 2 alternated.
set -uo pipefail
NAME=s27d; source tools/device_bundle_env.sh
for st in 2 3; do
  PENSTOCK_FP8_STAGGER=$st timeout 120 $P/bin/cuda_kernels_test --gtest_filter='Fp8TmaTest.*:Fp8Test.*' > $O/conf.$st.log 2>&1
  echo "Fp8 tests stagger $st rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.$st.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.$st.log) FAILED"
  grep -E "^\[  FAILED|\| FAIL|Failure" $O/conf.$st.log | head -5
done
for round in 1 2; do
  for st in 0 2 3; do
    PENSTOCK_FP8_STAGGER=$st timeout 90 $P/bin/penstock_bench_kernels --only fp8 > $O/fp8.$st.$round.jsonl 2>&1
    echo "== stagger $st round $round rc $?"
    python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench') == 'fp8_grouped_gemm' and r.get('variant') in ('wgmma_tma_wide', 'wgmma_tma_pair', 'glu_fused') or (r.get('bench') == 'fp8_gemm' and r.get('variant') == 'wgmma_tma_wide' and r.get('tokens') == 16384):
            print(f\"  {r['bench'][:16]:16s} {r.get('variant'):14s} {r.get('shape','')[:26]:26s} T{r.get('tokens')}: {r.get('time_us',0)/1000:.3f} ms {r.get('tflops',0):.0f}\")
" $O/fp8.$st.$round.jsonl
  done
done
layer() {  # stagger tag cfg layers tokens extra...
  local st=$1 tag=$2 cfg=$3 lay=$4 tok=$5; shift 5
  PENSTOCK_FP8_STAGGER=$st timeout 90 $P/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay --tokens $tok \
    --reps 8 --fp8-weights native --breakdown "$@" --json $O/$tag.$st.json > $O/$tag.$st.log 2>&1
  echo "$tag stagger $st rc $?: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (down {b.get('layer.moe.experts.down', 0):.2f}, gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f}, shared {b.get('layer.moe.shared', 0):.2f})\")" $O/$tag.$st.json 2>/dev/null)"
}
for round in 1 2 3; do
  for st in 2 0; do layer $st dsv3.$round deepseek-v3.json 3:4 16384 --fp8-attention; done
done
for round in 1 2; do
  for st in 2 0; do layer $st glm16k.$round glm-5.3.json 6:7 16384 --dsa-fp8-indexer; done
done
cd $O && tar czf ${OUT:-/tmp}/s27d.tgz *
