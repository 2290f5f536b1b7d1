#!/usr/bin/env bash
# Session 34 (no device lent), prepared for the next session's first call. Two bundles built from 512c983:
#   s34t = draft-f32-indexer-tf32x3-knob.diff applied (IndexerVariant::kMmaTf32, opt-in, its conformance mode with a
#          causal check, PENSTOCK_DSA_F32_INDEXER=tf32 to make kAuto take it in the layer); the tiled CUDA-core kernel
#          unchanged, so it is also the baseline;
#   s34c = ../2026-12-04-s33/unmeasured-f32-indexer-copies-after-16-columns.diff applied (the next head's copies
#          after the first 16 columns' products).
# Packed in session 34 (the build-dev-lead folder may not survive; if not, rebuild the same way):
#   git apply docs/perf/2026-12-04-s34/draft-f32-indexer-tf32x3-knob.diff && (cd build-cuda && ninja cuda_kernels_test \
#     penstock_model_bench penstock_bench_kernels cuda_runtime_test) && tools/pack_session_bundle.sh build-cuda s34t \
#     "tf32 draft + knob" && git checkout src tests && git apply \
#     docs/perf/2026-12-04-s33/unmeasured-f32-indexer-copies-after-16-columns.diff && (cd build-cuda && ninja ...) && \
#     tools/pack_session_bundle.sh build-cuda s34c "copies after 16 columns" s34t && git checkout src
# build-dev-lead/s34c.tar.xz then holds both folders (21 MB): carry that one file.
# Order: conformance first (a tf32 failure stops nothing else), kernel perf
# alternated, then GLM-5.3's layer 6 at 16K (bf16 weights, the default f32 indexer) alternated three ways, then
# Nsight Compute on the tf32 kernel (tools/device_bundle_env.sh's ncu_sass; `layer` prints the indexer and logits
# scopes). About 8-9 minutes.
set -uo pipefail
NAME=s34c; O=/tmp/out.s34; source tools/device_bundle_env.sh  # unpacks s34c and s34t
for b in s34t s34c; do
  timeout 300 /tmp/s/$b/bin/cuda_kernels_test --gtest_filter='DsaOpTest.IndexerLogits*' > $O/dsa_test.$b.log 2>&1
  echo "$b IndexerLogits rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $O/dsa_test.$b.log | tr '\n' ' '); $(grep -c '| PASS' $O/dsa_test.$b.log) PASS, $(grep -c '| FAIL' $O/dsa_test.$b.log) FAIL"
  grep -E "^\[  FAILED|\| FAIL" $O/dsa_test.$b.log | head -5
done
grep -E "\[tf32\]" $O/dsa_test.s34t.log | head -12
for round in 1 2; do
  [ "${SECONDS}" -lt 300 ] || break  # the Perf test takes ~50 s a run; keep the call under the 600 s limit
  for b in s34t s34c; do
    PENSTOCK_CUDA_PERF=1 timeout 120 /tmp/s/$b/bin/cuda_kernels_test --gtest_filter='DsaOpTest.Perf' > $O/perf.$round.$b.log 2>&1
    echo "perf $round $b rc $? at ${SECONDS}s: $(grep -E '\[perf\] dsa_indexer_logits f32' $O/perf.$round.$b.log | tr '\n' ' ')"
  done
done
for round in 1 2 3; do
  layer s34t glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant
  PENSTOCK_DSA_F32_INDEXER=tf32 layer s34t glmtf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant
  layer s34c glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant
done
PENSTOCK_CUDA_PERF=1 ncu_sass tf32 tf32 /tmp/s/s34t/bin/cuda_kernels_test --gtest_filter=DsaOpTest.Perf
cd $O && tar czf ${OUT:-/tmp}/s34.tgz *.log *.json *.txt *.csv
