#!/usr/bin/env bash
# Session 23, call C: DsaOpTest.* (the dispatch with fp8_accumulate against the CPU reference and bit for bit against
# the forced kWgmmaFp8 kernel), then the GLM-5.3 DSA layer (FP8 indexer; bf16 and native FP8 weights; T 16K and 64K,
# prefix 0) with and without --dsa-fp8-accumulate, interleaved over two rounds (the layer runs at the power limit).
set -uo pipefail
N=${NAME:-s23c}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/s23c; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
set -f
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='DsaOpTest.*' > $O/conf.log 2>&1
echo "conformance rc $? ($(grep -c '| PASS' $O/conf.log) PASS, $(grep -c '| FAIL' $O/conf.log) FAIL)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" $O/conf.log | head
grep "fp8_accumulate" $O/conf.log | head -4
for round in 1 2; do
  for mode in exact acc; do
    extra=""; [ $mode = acc ] && extra="--dsa-fp8-accumulate"
    timeout 110 $P/bin/penstock_model_bench --config $P/configs/glm-5.3.json --model-name glm.$mode --layers 6:7 \
      --tokens 16384,65536 --reps 3 --dsa-fp8-indexer --fp8-weights dequant,native --breakdown $extra \
      --json $O/glm.$mode.$round.json > $O/glm.$mode.$round.log 2>&1
    echo "round $round $mode rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
for r in json.load(open(sys.argv[1])):
    if 'median_ms' not in r: continue
    b = {x['scope']: x['median_ms'] for x in r.get('breakdown', [])}
    print(f\"T{r['tokens']} {r['fp8_weights']} {r['median_ms']:.2f} ms (logits {b.get('layer.attn.indexer.logits', 0):.2f}, topk {b.get('layer.attn.indexer.topk', 0):.2f});\", end=' ')
" $O/glm.$mode.$round.json 2>/dev/null)"
  done
done
cd $O && tar czf $OUT/s23c.tgz ./*.log ./*.json
