#!/usr/bin/env bash
# Builds a session-55 call archive (build-dev-lead/$BUNDLE.tar.xz, default s55b) from this checkout: the three
# binaries the call scripts run; DESC is the COMMIT line's description (calls C and D ran before DESC existed, so
# their bundles carry call B's text).
#   [BUNDLE=s55c] [DESC=...] bash docs/perf/2026-12-07-s55/pack_s55b.sh && run: bash docs/perf/2026-12-07-s55/s55b.sh, carry build-dev-lead/s55b.tar.xz
set -euo pipefail
[ -f build-cuda/build.ninja ] || cmake -S . -B build-cuda -G Ninja -DPENSTOCK_CUDA=ON -DCMAKE_BUILD_TYPE=Release > /dev/null
ninja -C build-cuda -j2 penstock_bench_kernels penstock_model_bench cuda_kernels_test
BUNDLE_BINS="cuda_kernels_test penstock_bench_kernels penstock_model_bench" tools/pack_session_bundle.sh build-cuda "${BUNDLE:-s55b}" \
  "${DESC:-bf16 MoE gate/up GEMM gathers the token rows (GroupedGluGemmParams::gather), TMA-store forms dropped}"
