#!/usr/bin/env bash
# Session 36, call C: the f16 three-product indexer kernel loading each key row once into registers (bundle s36c)
# against call B's two-pass kernel (bundle s36b), both kAuto's f32 path.
# Bundles: tools/pack_session_bundle.sh build-cuda s36c "..." s36b (carry build-dev-lead/s36c.tar.xz: both folders).
# Conformance of the indexer logits, DsaOpTest.Perf twice, GLM-5.3 layer 6 at 16K (bf16 weights, the default f32
# indexer) s36c / s36b alternated three times, 64K once each; then the kernel bench's DSA section.
set -uo pipefail
NAME=s36c; O=/tmp/out.s36c; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
timeout 300 $P/bin/cuda_kernels_test --gtest_filter='DsaOpTest.IndexerLogits*' > $O/dsa_test.log 2>&1
echo "IndexerLogits rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $O/dsa_test.log | tr '\n' ' '); $(grep -c '| PASS' $O/dsa_test.log) PASS, $(grep -c '| FAIL' $O/dsa_test.log) FAIL"
grep -E "^\[  FAILED|\| FAIL" $O/dsa_test.log | head -5
grep -E "f16x3|wide" $O/dsa_test.log | head -30
for round in 1 2; do
  PENSTOCK_CUDA_PERF=1 timeout 120 $P/bin/cuda_kernels_test --gtest_filter='DsaOpTest.Perf' > $O/perf.$round.log 2>&1
  echo "perf $round rc $? at ${SECONDS}s: $(grep -E '\[perf\] dsa_indexer_logits f32 .*TFLOP' $O/perf.$round.log | tr '\n' ' ')"
done
for round in 1 2 3; do
  layer s36c glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant
  layer s36b glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant
done
LAYER_REPS=3 LAYER_TIMEOUT=200 layer s36c glmbf64k glm-5.3.json 6:7 65536 --fp8-weights dequant
LAYER_REPS=3 LAYER_TIMEOUT=200 layer s36b glmbf64k glm-5.3.json 6:7 65536 --fp8-weights dequant
cd $O && tar czf ${OUT:-/tmp}/s36c.tgz *.log *.json 2>/dev/null; cd - > /dev/null
# The kernel bench's DSA section (fp8 variants, the f32 tensor-core kernels, top-k) at 4K / 16K / 64K.
[ "${SECONDS}" -lt 330 ] || exit 0
timeout 200 $P/bin/penstock_bench_kernels --only dsa > $O/dsa_bench.jsonl 2> $O/dsa_bench.err
echo "dsa bench rc $? at ${SECONDS}s"
python3 -c "
import json,sys
for l in open(sys.argv[1]):
    try: r=json.loads(l)
    except Exception: continue
    if r.get('bench')=='dsa_indexer_logits': print(r.get('tokens'), r.get('variant'), round(r.get('ms',0),3), 'ms', round(r.get('tflops',0),1), 'TFLOP/s')
" $O/dsa_bench.jsonl
cd $O && tar czf ${OUT:-/tmp}/s36c.tgz *.log *.json *.jsonl *.err 2>/dev/null
