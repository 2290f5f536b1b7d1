#!/usr/bin/env bash
# Rebuilds call B's archive (build-dev-lead/s53b.tar.xz, ~16 MiB) in a checkout of this session's code: configures
# build-cuda, builds the three binaries s53b.sh runs and packs them. ~25 min on 2 cores.
#   bash docs/perf/2026-12-07-s53/pack_s53b.sh && run: bash docs/perf/2026-12-07-s53/s53b.sh, carry build-dev-lead/s53b.tar.xz
set -euo pipefail
[ -f build-cuda/build.ninja ] || cmake -S . -B build-cuda -G Ninja -DPENSTOCK_CUDA=ON -DCMAKE_BUILD_TYPE=Release > /dev/null
ninja -C build-cuda -j2 penstock_bench_kernels penstock_model_bench cuda_kernels_test
BUNDLE_BINS="cuda_kernels_test penstock_bench_kernels penstock_model_bench" tools/pack_session_bundle.sh build-cuda s53b \
  "TMA-store epilogues (FP8 GEMM, bf16 grouped GEMM) + s52 call A"
