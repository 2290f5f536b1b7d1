#!/usr/bin/env bash
# Session 27, call E: the FP8 GEMM epilogue. s27d = 3b0d476 + the consumers' stagger (PENSTOCK_FP8_STAGGER, 0 = the
# old kernel); s27e = s27d + 16-byte epilogue stores (bf16 out and the gated FP8 out, quad transposes). FP8 conformance
# on s27e at stagger 2 and 3; the fp8 bench: s27d@0, s27d@2, s27e@0, s27e@2 alternated; DeepSeek-V3 FP8 (+
# --fp8-attention) and GLM-5.3 FP8 layers at 16K: s27d@0 against s27e@2 (and s27e@0), alternated.
set -uo pipefail
NAME=s27e; source tools/device_bundle_env.sh   # the tarball holds s27e and s27d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for st in 2 3; do
  PENSTOCK_FP8_STAGGER=$st timeout 120 $P/bin/cuda_kernels_test --gtest_filter='Fp8TmaTest.*:Fp8Test.*' > $O/conf.$st.log 2>&1
  echo "Fp8 tests s27e stagger $st rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.$st.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.$st.log) FAILED"
  grep -E "^\[  FAILED|\| FAIL|Failure" $O/conf.$st.log | head -5
done
for round in 1 2; do
  for v in s27d:0 s27d:2 s27e:0 s27e:2; do
    b=${v%:*}; st=${v#*:}
    PENSTOCK_FP8_STAGGER=$st timeout 90 /tmp/s/$b/bin/penstock_bench_kernels --only fp8 > $O/fp8.$b.$st.$round.jsonl 2>&1
    echo "== $b stagger $st round $round rc $?"
    python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench') == 'fp8_grouped_gemm' and r.get('variant') in ('wgmma_tma_wide', 'wgmma_tma_pair', 'glu_fused') or (r.get('bench') == 'fp8_gemm' and r.get('variant') == 'wgmma_tma_wide' and r.get('tokens') == 16384):
            print(f\"  {r['bench'][:16]:16s} {r.get('variant'):14s} {r.get('shape','')[:26]:26s} T{r.get('tokens')}: {r.get('time_us',0)/1000:.3f} ms {r.get('tflops',0):.0f}\")
" $O/fp8.$b.$st.$round.jsonl
  done
done
layer() {  # bundle stagger tag cfg layers tokens extra...
  local b=$1 st=$2 tag=$3 cfg=$4 lay=$5 tok=$6; shift 6
  PENSTOCK_FP8_STAGGER=$st timeout 90 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay \
    --tokens $tok --reps 8 --fp8-weights native --breakdown "$@" --json $O/$tag.$b.$st.json > $O/$tag.$b.$st.log 2>&1
  echo "$tag $b stagger $st rc $?: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (down {b.get('layer.moe.experts.down', 0):.2f}, gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f}, shared {b.get('layer.moe.shared', 0):.2f})\")" $O/$tag.$b.$st.json 2>/dev/null)"
}
for round in 1 2; do
  for v in s27e:2 s27d:0 s27e:0; do layer ${v%:*} ${v#*:} dsv3.$round deepseek-v3.json 3:4 16384 --fp8-attention; done
done
for round in 1 2; do
  for v in s27e:2 s27d:0; do layer ${v%:*} ${v#*:} glm16k.$round glm-5.3.json 6:7 16384 --dsa-fp8-indexer; done
done
cd $O && tar czf ${OUT:-/tmp}/s27e.tgz *
