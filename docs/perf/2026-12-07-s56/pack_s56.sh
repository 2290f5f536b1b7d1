#!/usr/bin/env bash
# Builds a session-56 call archive (build-dev-lead/$BUNDLE.tar.xz, default s56a) from this checkout: the three
# binaries the call scripts run; DESC is the COMMIT line's description.
#   [BUNDLE=s56a] [DESC=...] bash docs/perf/2026-12-07-s56/pack_s56.sh && run: bash docs/perf/2026-12-07-s56/s56a.sh, carry build-dev-lead/s56a.tar.xz
set -euo pipefail
[ -f build-cuda/build.ninja ] || cmake -S . -B build-cuda -G Ninja -DPENSTOCK_CUDA=ON -DCMAKE_BUILD_TYPE=Release > /dev/null
ninja -C build-cuda -j2 penstock_bench_kernels penstock_model_bench cuda_kernels_test
BUNDLE_BINS="cuda_kernels_test penstock_bench_kernels penstock_model_bench" tools/pack_session_bundle.sh build-cuda "${BUNDLE:-s56a}" \
  "${DESC:-session 56 build}"
