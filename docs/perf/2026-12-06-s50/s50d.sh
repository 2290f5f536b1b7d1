#!/usr/bin/env bash
# Session 50, call D (run as one command on call C's warm H100): three more alternated rounds of call C's A/B, s50b
# first in each: the grouped DeepSeek-V3 expert GEMMs at T = 16384 (wide, pair and fused GLU lines), then the
# DeepSeek-V3 FP8 and GLM-5.3 FP8 layers at 16K.
NAME=s50b; O=/tmp/out.s50d; source tools/device_bundle_env.sh
for r in 3 4 5; do for b in s50b s50a; do
  PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=16384 timeout 120 /tmp/s/$b/bin/penstock_bench_kernels --only fp8 \
    > $O/fp8.$r.$b.jsonl 2>&1
  python3 -c "
import json,sys
for l in open('$O/fp8.$r.$b.jsonl'):
  if not l.startswith('{'): continue
  r=json.loads(l)
  if r.get('bench')=='fp8_grouped_gemm' and r['variant'] in ('wgmma_tma_wide','wgmma_tma_pair','glu_fused'): print('$b r$r', r['shape'][:12], r['variant'], round(r['time_us'],1))
"
done; done
G=(--fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate)
for r in 4 5 6; do for b in s50b s50a; do
  LAYER_REPS=6 layer $b dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  LAYER_REPS=6 layer $b glm16.$r glm-5.3.json 6:7 16384 "${G[@]}"
done; done
cd $O && tar czf $OUT/s50d.tgz *.jsonl *.json *.log
