#!/usr/bin/env bash
# Rebuilds call A's archive (build-dev-lead/s52a.tar.xz, ~15 MiB) in a fresh checkout: configures build-cuda, builds
# the three binaries pack_session_bundle.sh takes and packs the two that s52a.sh runs. ~25 min on 2 cores.
#   bash docs/perf/2026-12-06-s52/pack_s52a.sh && run: bash docs/perf/2026-12-06-s52/s52a.sh, carry build-dev-lead/s52a.tar.xz
set -euo pipefail
[ -f build-cuda/build.ninja ] || cmake -S . -B build-cuda -G Ninja -DPENSTOCK_CUDA=ON -DCMAKE_BUILD_TYPE=Release > /dev/null
ninja -C build-cuda -j2 penstock_bench_kernels penstock_model_bench cuda_kernels_test
BUNDLE_BINS="penstock_bench_kernels penstock_model_bench" tools/pack_session_bundle.sh build-cuda s52a \
  "probe random operands + model bench host enqueue"
