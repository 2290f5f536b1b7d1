#!/usr/bin/env bash
# How calls A, B and D's bundles were made (session 57). s57a: de53f24's penstock_model_bench and
# penstock_bench_kernels (build-cuda). build-dg/dg.tar.xz (call A) and build-dg/dg211.tar.xz (call D): DeepGEMM's
# source at 54e2261 and at v2.1.1.post3 (c9f8b34), each with the headers of its two submodules at the commits both
# pin (CUTLASS f3fde58: include/ only; fmt 553ec11: include/ only), from local mirrors of the three repositories;
# carried to the device only, never committed.
#   bash docs/perf/2026-12-07-s57/pack_s57a.sh DEEPGEMM_GIT CUTLASS_GIT FMT_GIT
set -euo pipefail
BUNDLE_BINS="penstock_model_bench penstock_bench_kernels" tools/pack_session_bundle.sh build-cuda s57a \
  "de53f24 (HEAD): DeepGEMM comparison + goal rows"
dg=$1 cutlass=$2 fmt=$3
stage=$(mktemp -d)
trap 'rm -rf "${stage}"' EXIT
mkdir -p build-dg
for pair in 54e2261:dg c9f8b34:dg211; do
  rm -rf "${stage}/DeepGEMM"
  mkdir -p "${stage}/DeepGEMM/third-party/cutlass" "${stage}/DeepGEMM/third-party/fmt"
  git -C "${dg}" archive "${pair%%:*}" | tar -x -C "${stage}/DeepGEMM"
  git -C "${cutlass}" archive f3fde58372d33e9a5650ba7b80fc48b3b49d40c8 include | tar -x -C "${stage}/DeepGEMM/third-party/cutlass"
  git -C "${fmt}" archive 553ec11ec06fbe0beebfbb45f9dc3c9eabd83d28 include | tar -x -C "${stage}/DeepGEMM/third-party/fmt"
  tar -C "${stage}" -cf - DeepGEMM | xz -T2 -9 > "build-dg/${pair##*:}.tar.xz"
done
ls -la build-dg/
