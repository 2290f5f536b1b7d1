#!/usr/bin/env bash
# Session 33, prepared for the next session (not run: no device): bundle s33f = the code with
# draft-f32-indexer-tf32x3.diff applied (IndexerVariant::kMmaTf32: the f32 indexer logits as three TF32 products per
# dot on mma.sync m16n8k8, opt-in). DsaOpTest.IndexerLogits* (mode 4: the tf32 variant against the reference's
# kF32IndexerLogits tolerance on the 32- and 64-head cases) and the Perf test's f32 lines (the tiled CUDA-core kernel
# and the tf32 variant in the same process).
#   git apply docs/perf/2026-12-04-s33/draft-f32-indexer-tf32x3.diff && (cd build-cuda && ninja cuda_kernels_test \
#     penstock_model_bench penstock_bench_kernels) && tools/pack_session_bundle.sh build-cuda s33f "tf32 draft"
set -uo pipefail
NAME=s33f; O=/tmp/out.s33f; source tools/device_bundle_env.sh
timeout 300 /tmp/s/s33f/bin/cuda_kernels_test --gtest_filter='DsaOpTest.IndexerLogits*' > $O/dsa_test.log 2>&1
echo "IndexerLogits rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $O/dsa_test.log | tr '\n' ' '); $(grep -c '| PASS' $O/dsa_test.log) PASS, $(grep -c '| FAIL' $O/dsa_test.log) FAIL"
grep -E "\[tf32\]|^\[  FAILED" $O/dsa_test.log | head -8
PENSTOCK_CUDA_PERF=1 timeout 120 /tmp/s/s33f/bin/cuda_kernels_test --gtest_filter='DsaOpTest.Perf' > $O/perf.log 2>&1
echo "perf rc $? at ${SECONDS}s"; grep -E "\[perf\] dsa_indexer_logits f32" $O/perf.log
cd $O && tar czf ${OUT:-/tmp}/s33f.tgz *.log
