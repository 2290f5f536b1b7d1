#!/usr/bin/env bash
# Session 25, call D: the DSA conformance (every top-k case on kAuto, kRangeRadix, kRangeRadixScalarCompact and
# kLegacy against the CPU reference, the cluster cases included), the dsa kernel bench (logits + top-k at 4K / 16K /
# 64K; the top-k with the four-keys-per-lane compaction beside kRangeRadixScalarCompact, interleaved, same process),
# then the GLM-5.3 DSA layer at T 65536 and 16384 (native FP8, FP8 indexer, fp8-accumulate at 64K) of the new binary
# and the base one (bin/penstock_model_bench.base: b70b3ba's work tree, the one-key-per-lane compaction), interleaved,
# one round each (the session's last device minutes); results written straight under $OUT.
set -uo pipefail
N=${NAME:-s25d}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=${OUT:-/tmp}/$N; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='DsaOpTest.Topk*' > $O/conf.log 2>&1
echo "conformance rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED"
grep -E "FAILED|differ|mismatch" $O/conf.log | head -8
timeout 90 $P/bin/penstock_bench_kernels --only dsa --warmup 2 --reps 7 > $O/dsa.jsonl 2>&1
echo "dsa bench rc $? at ${SECONDS}s"
python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r['bench'] == 'dsa_topk' and 'ms' in r:
            print(f\"  T{r.get('tokens')} {r.get('input', 'logits')}: {r['ms']:.3f} / {r.get('ms_second_round', 0):.3f} ms vs scalar compaction {r.get('scalar_compact_ms')} = {r.get('speedup_vs_scalar_compact', 0):.3f}x; legacy {r.get('legacy_ms', 0):.3f}; tied {r.get('tied_rows')}; mism {r.get('mismatches_vs_legacy')} / scalar {r.get('scalar_compact_mismatches_vs_legacy')}\")
" $O/dsa.jsonl
summ() { python3 -c "
import json, sys
for r in json.load(open(sys.argv[1])):
    if 'median_ms' not in r: continue
    b = {x['scope']: x['median_ms'] for x in r.get('breakdown', [])}
    ks = [k for k in sys.argv[2:]]
    print(f\"{r['fp8_weights']} {r['median_ms']:.2f} ms (\" + ', '.join(f'{k.split(\".\")[-1]} {b.get(k, 0):.2f}' for k in ks) + f\"; J/rep {r.get('energy_j_per_rep', 0):.1f});\", end=' ')
" "$@" 2>/dev/null; }
for round in 1; do
  for b in new base; do
    bin=$P/bin/penstock_model_bench; [ $b = base ] && bin=$bin.base
    timeout 100 $bin --config $P/configs/glm-5.3.json --model-name glm.$b --layers 6:7 --tokens 65536 --reps 5 \
      --dsa-fp8-indexer --dsa-fp8-accumulate --fp8-weights native --breakdown --json $O/glm.$b.$round.json > $O/glm.$b.$round.log 2>&1
    echo "glm64K round $round $b rc $? at ${SECONDS}s: $(summ $O/glm.$b.$round.json layer.attn.indexer.logits layer.attn.indexer.topk)"
  done
done
for round in 1; do for b in new base; do
  bin=$P/bin/penstock_model_bench; [ $b = base ] && bin=$bin.base
  timeout 60 $bin --config $P/configs/glm-5.3.json --model-name glm16.$b --layers 6:7 --tokens 16384 --reps 5 \
    --dsa-fp8-indexer --fp8-weights native --breakdown --json $O/glm16.$b.$round.json > $O/glm16.$b.$round.log 2>&1
  echo "glm16K round $round $b rc $? at ${SECONDS}s: $(summ $O/glm16.$b.$round.json layer.attn.indexer.logits layer.attn.indexer.topk)"
done; done
