#!/usr/bin/env bash
# Session 27, call C: where the FP8 grouped GEMM's time goes, by diagnostic builds of fp8_gemm_tma.cu (not landed;
# their outputs are wrong): diag1 skips the epilogue's global stores, diag2 the promotion FFMAs, diag3 the consumers'
# wait for each stage's data (they read whatever the stage holds). bench_base: the unchanged kernel (3b0d476).
set -uo pipefail
NAME=s27c; source tools/device_bundle_env.sh
for round in 1 2; do
  for b in base diag1 diag2 diag3; do
    timeout 90 $P/bin/bench_$b --only fp8 > $O/fp8.$b.$round.jsonl 2>&1
    echo "== $b $round rc $?"
    python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench') == 'fp8_grouped_gemm' and r.get('variant') in ('wgmma_tma_wide', 'wgmma_tma_pair', 'glu_fused') or (r.get('bench') == 'fp8_gemm' and r.get('variant') == 'wgmma_tma_wide' and r.get('tokens') == 16384):
            print(f\"  {r['bench'][:16]:16s} {r.get('variant'):14s} {r.get('shape','')[:26]:26s} T{r.get('tokens')}: {r.get('time_us',0)/1000:.3f} ms {r.get('tflops',0):.0f}\")
" $O/fp8.$b.$round.jsonl
  done
done
cd $O && tar czf ${OUT:-/tmp}/s27c.tgz *
