#!/usr/bin/env bash
# Session 26, call C: dsa_quantize_fp8's dim-128 kernel with eight lanes per row (the exponent shortcut for ue8m0, a
# multiply by 2^-e, the hardware cast): the DSA conformance (QuantizeFp8BitExact, the new QuantizeFp8Ue8m0ExponentEdges
# and the rest), DsaOpTest.Perf, then the GLM-5.3 DSA layer (native FP8, FP8 indexer) at T 65536 (fp8-accumulate) and
# 16384 with the new binary and the base one (s26a: the warp-per-row kernel), alternated. Everything lands in one tgz.
set -uo pipefail
N=${NAME:-s26c}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/out.$N; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='DsaOpTest.*' > $O/conf.log 2>&1
echo "DsaOpTest rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED, $(grep -c '| PASS' $O/conf.log) PASS, $(grep -c '| FAIL' $O/conf.log) FAIL"
grep -E "^\[  FAILED|\| FAIL|quantize" $O/conf.log | head -30
PENSTOCK_CUDA_PERF=1 timeout 120 $P/bin/cuda_kernels_test --gtest_filter='DsaOpTest.Perf' > $O/perf.log 2>&1
echo "perf rc $? at ${SECONDS}s"; grep -E "quantize" $O/perf.log
summ() { python3 -c "
import json, sys
for r in json.load(open(sys.argv[1])):
    if 'median_ms' not in r: continue
    b = {x['scope']: x['median_ms'] for x in r.get('breakdown', [])}
    print(f\"{r['median_ms']:.2f} ms (q quant {b.get('layer.attn.indexer.q_proj.quant', 0):.3f}, k_write {b.get('layer.attn.indexer.k_write', 0):.3f}, indexer {b.get('layer.attn.indexer', 0):.2f}, topk {b.get('layer.attn.indexer.topk', 0):.2f})\", end=' ')
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
