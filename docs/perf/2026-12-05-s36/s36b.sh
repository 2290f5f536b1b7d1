#!/usr/bin/env bash
# Session 36, call B: the f16 three-product indexer kernel (kWgmmaF16x3, kAuto's f32 path in bundle s36b) against
# the tf32 one (kWgmmaTf32, kAuto in bundle s36a, call A's binary).
# Bundles: tools/pack_session_bundle.sh build-cuda s36b "..." s36a (carry build-dev-lead/s36b.tar.xz: both folders).
# 1. conformance of the indexer logits (every f32 variant, the wide-magnitude case);
# 2. DsaOpTest.Perf twice (tiled, mma.sync tf32, wgmma tf32, wgmma f16x3 in one process);
# 3. GLM-5.3 layer 6 at 16K, bf16 weights, the default f32 indexer, s36b / s36a alternated three times; 64K once each.
set -uo pipefail
NAME=s36b; O=/tmp/out.s36b; source tools/device_bundle_env.sh
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
  layer s36b glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant
  layer s36a glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant
done
LAYER_REPS=3 LAYER_TIMEOUT=200 layer s36b glmbf64k glm-5.3.json 6:7 65536 --fp8-weights dequant
LAYER_REPS=3 LAYER_TIMEOUT=200 layer s36a glmbf64k glm-5.3.json 6:7 65536 --fp8-weights dequant
cd $O && tar czf ${OUT:-/tmp}/s36b.tgz *.log *.json 2>/dev/null
