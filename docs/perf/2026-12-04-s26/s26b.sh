#!/usr/bin/env bash
# Session 26, call B: the FP8 grouped GEMM's consumer warpgroups with a chain order (PENSTOCK_FP8_WG_ORDER: free / issue
# / done; descriptors from a per-stage base and scales loaded a k-step ahead in all three): the Fp8 conformance tests
# under each order, the fp8 kernel bench with the three orders back to back, then the DeepSeek-V3 layer at T 16384 with
# native FP8 weights + --fp8-attention and GLM-5.3 (native FP8) under each order, interleaved, two rounds.
set -uo pipefail
N=${NAME:-s26b}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=${OUT:-/tmp}/$N; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
for o in issue done free; do
  PENSTOCK_FP8_WG_ORDER=$o timeout 120 $P/bin/cuda_kernels_test --gtest_filter='Fp8*' > $O/conf.$o.log 2>&1
  echo "Fp8 tests order $o rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.$o.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.$o.log) FAILED, $(grep -c '| PASS' $O/conf.$o.log) PASS, $(grep -c '| FAIL' $O/conf.$o.log) FAIL"
  grep -E "^\[  FAILED|\| FAIL" $O/conf.$o.log | head -5
done
PENSTOCK_BENCH_FP8_ORDERS=free,issue,done,free,issue,done timeout 240 $P/bin/penstock_bench_kernels --only fp8 > $O/fp8.jsonl 2>&1
echo "fp8 bench rc $? at ${SECONDS}s"
python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench') == 'fp8_grouped_gemm':
            print(f\"  {r.get('variant'):20s} {r.get('wg_order','-'):6s} {r.get('shape', r.get('name',''))[:24]:24s} T{r.get('tokens')}: {r.get('time_us',0)/1000:.3f} ms {r.get('tflops',0):.0f} TFLOP/s\")
" $O/fp8.jsonl
summ() { python3 -c "
import json, sys
for r in json.load(open(sys.argv[1])):
    if 'median_ms' not in r: continue
    b = {x['scope']: x['median_ms'] for x in r.get('breakdown', [])}
    print(f\"{r['median_ms']:.2f} ms (gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f}, down {b.get('layer.moe.experts.down', 0):.2f}, attn {b.get('layer.attn', 0):.2f}; J/rep {r.get('energy_j_per_rep', 0):.1f})\", end=' ')
" "$@" 2>/dev/null; }
for round in 1 2; do
  for o in free issue done; do
    PENSTOCK_FP8_WG_ORDER=$o timeout 100 $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --model-name dsv3.$o --layers 3:4 --tokens 16384 --reps 8 \
      --fp8-weights native --fp8-attention --breakdown --json $O/dsv3.$o.$round.json > $O/dsv3.$o.$round.log 2>&1
    echo "dsv3 fp8 round $round $o rc $? at ${SECONDS}s: $(summ $O/dsv3.$o.$round.json)"
  done
done
for o in free issue done; do
  PENSTOCK_FP8_WG_ORDER=$o timeout 100 $P/bin/penstock_model_bench --config $P/configs/glm-5.3.json --model-name glm.$o --layers 6:7 --tokens 16384 --reps 8 \
    --dsa-fp8-indexer --fp8-weights native --breakdown --json $O/glm.$o.json > $O/glm.$o.log 2>&1
  echo "glm16K fp8 $o rc $? at ${SECONDS}s: $(summ $O/glm.$o.json)"
done
