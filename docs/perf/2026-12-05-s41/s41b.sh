#!/usr/bin/env bash
# Session 41, call B (bundle s41b = 3d895b8 + the stream top-k kernel, with s41a = 3d895b8 as the same-call baseline):
# (1) DsaOpTest (the top-k conformance now runs kRangeRadixRowSmem and kRangeRadixStream too); (2) the dsa kernel
# bench (indexer logits and top-k at T 4K / 16K / 64K; the top-k record times the default beside kRangeRadixRowSmem,
# interleaved); (3) GLM-5.3 layer 6 at T 65536 and 16384, native FP8, FP8 indexer, fp8-accumulate, s41b and s41a
# alternated.
set -uo pipefail
NAME=s41b; O=/tmp/out.s41b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s41b.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
timeout 200 "$P/bin/cuda_kernels_test" --gtest_filter='DsaOpTest.*' > "$O/conf.log" 2>&1
echo "conformance rc $? at ${SECONDS}s: $(grep -c '^\[       OK' "$O/conf.log") OK, $(grep -c '^\[  FAILED  \].*(' "$O/conf.log") FAILED"
grep -E "FAILED|Failure|differ|mismatch|missed|fallback|replay" "$O/conf.log" | head -12
save
timeout 150 "$P/bin/penstock_bench_kernels" --only dsa --warmup 2 --reps 7 > "$O/dsa.jsonl" 2>&1
echo "dsa bench rc $? at ${SECONDS}s"
python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r['bench'] == 'dsa_topk' and 'ms' in r:
            print(f\"  T{r.get('tokens')} {r.get('input', 'logits')[:12]}: {r['ms']:.4f} / {r.get('ms_second_round', 0):.4f} / {r.get('ms_rounds_3_4')} ms; row_smem {r.get('row_smem_ms')} x{r.get('speedup_vs_row_smem', 0):.2f}; legacy {r.get('legacy_ms', 0):.3f}; tied {r.get('tied_rows')}; global {r.get('rows_from_global')}; mism {r.get('mismatches_vs_legacy')} {r.get('mismatches_vs_legacy_round_4')} {r.get('row_smem_mismatches_vs_legacy')}\")
" "$O/dsa.jsonl"
save
for round in 1 2; do
  for b in s41b s41a; do
    LAYER_REPS=5 LAYER_TIMEOUT=100 layer $b glm64.$round glm-5.3.json 6:7 65536 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
    python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]; b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print('   topk', round(b.get('layer.attn.indexer.topk', 0), 3), 'logits', round(b.get('layer.attn.indexer.logits', 0), 3))
" "$O/glm64.$round.$b.json"
  done
  save
done
for b in s41b s41a; do
  layer $b glm16 glm-5.3.json 6:7 16384 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
done
save
