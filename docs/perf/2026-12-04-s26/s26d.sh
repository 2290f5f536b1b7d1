#!/usr/bin/env bash
# Session 26, call D: dsa_quantize_fp8's eight-lanes-per-row kernel with the next rows' loads issued first, and
# fp8_act_quant's 16-column kernel on a persistent grid with the next unit's loads issued first: the Fp8 and DSA
# quantisation conformance, then alternated A/Bs against the previous binaries (cuda_kernels_test.base: call C's
# dsa quantiser, the one-unit-per-thread act_quant; penstock_bench_kernels.base: call B's build, the same act_quant):
# DsaOpTest.Perf, the fp8_quant bench, the GLM-5.3 layer at 64K and 16K.
set -uo pipefail
N=${NAME:-s26d}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/out.$N; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='Fp8*:QuantizeE4m3*:DsaOpTest.Quantize*' > $O/conf.log 2>&1
echo "conformance rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED, $(grep -c '| PASS' $O/conf.log) PASS, $(grep -c '| FAIL' $O/conf.log) FAIL"
grep -E "^\[  FAILED|\| FAIL" $O/conf.log | head
for round in 1 2; do
  for b in new base; do
    bin=$P/bin/cuda_kernels_test; [ $b = base ] && bin=$bin.base
    PENSTOCK_CUDA_PERF=1 timeout 60 $bin --gtest_filter='DsaOpTest.Perf' > $O/perf.$b.$round.log 2>&1
    echo "dsa perf $b $round: $(grep -E 'quantize_fp8 rows' $O/perf.$b.$round.log | tr '\n' ' ')"
  done
done
for round in 1 2; do
  for b in new base; do
    bin=$P/bin/penstock_bench_kernels; [ $b = base ] && bin=$bin.base
    timeout 60 $bin --only fp8_quant > $O/actq.$b.$round.jsonl 2>&1
    echo "act_quant $b $round: $(python3 -c "
import json, sys
out = []
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench') == 'fp8_act_quant': out.append(f\"{r['rows']}x{r['k']} {r['time_us']:.1f}us {r.get('pct_of_copy_peak', 0):.0f}%\")
print('; '.join(out))" $O/actq.$b.$round.jsonl)"
  done
done
summ() { python3 -c "
import json, sys
for r in json.load(open(sys.argv[1])):
    if 'median_ms' not in r: continue
    b = {x['scope']: x['median_ms'] for x in r.get('breakdown', [])}
    print(f\"{r['median_ms']:.2f} ms (q quant {b.get('layer.attn.indexer.q_proj.quant', 0):.3f}, o_proj act_quant {b.get('layer.attn.o_proj.act_quant', 0):.3f}, permute {b.get('layer.moe.permute', 0):.3f})\", end=' ')
" "$@" 2>/dev/null; }
for b in new base; do
  bin=$P/bin/penstock_model_bench; [ $b = base ] && bin=$bin.base
  timeout 100 $bin --config $P/configs/glm-5.3.json --model-name glm.$b --layers 6:7 --tokens 65536 --reps 5 \
    --dsa-fp8-indexer --dsa-fp8-accumulate --fp8-weights native --breakdown --json $O/glm64.$b.json > $O/glm64.$b.log 2>&1
  echo "glm64K $b rc $? at ${SECONDS}s: $(summ $O/glm64.$b.json)"
done
for b in new base new base; do
  bin=$P/bin/penstock_model_bench; [ $b = base ] && bin=$bin.base
  timeout 60 $bin --config $P/configs/glm-5.3.json --model-name glm16.$b --layers 6:7 --tokens 16384 --reps 8 \
    --dsa-fp8-indexer --fp8-weights native --breakdown --json $O/glm16.$b.json > $O/glm16.$b.log 2>&1
  echo "glm16K $b rc $? at ${SECONDS}s: $(summ $O/glm16.$b.json)"
done
cd $O && tar czf ${OUT:-/tmp}/$N.tgz *
