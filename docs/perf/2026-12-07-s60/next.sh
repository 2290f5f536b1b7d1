#!/usr/bin/env bash
# Prepared in session 60 for the next device call (not run: the session's device time ran out after call D2).
# Bundle pfG = HEAD + `git apply docs/perf/2026-12-07-s60/scale-smem-aligned.diff` (the scales through shared memory
# with the activation-scale box started 16 bytes aligned, and the producer tail), pfA = HEAD, pfB = HEAD + the src part
# of 2026-12-07-s58/next-scale-prefetch.diff (three binaries each):
#   BUNDLE_BINS="penstock_model_bench penstock_bench_kernels cuda_kernels_test" tools/pack_session_bundle.sh build-cuda pfG "..." pfA pfB
# Steps: pfG's Fp8TmaTest.* conformance (stop on failure, with compute-sanitizer on GroupedGemm); then the kernel bench
# of pfA, pfG, pfB interleaved (two rounds with QUICK=1, else three), the DeepSeek-V3 FP8 layer at 16K with the
# default tiles (pfA, pfG, pfB) and with PENSTOCK_FP8_N192=1 (pfG, pfA), one round with QUICK=1, else two.
#   run: bash docs/perf/2026-12-07-s60/next.sh, carry build-dev-lead/pfG.tar.xz
set -uo pipefail
NAME=pfG; O=${OUT:-/tmp/out.next}; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
B=/tmp/s/pfG/bin/cuda_kernels_test
timeout 200 stdbuf -oL -eL "$B" --gtest_filter='Fp8TmaTest.*' > "$O/conf.pfG.log" 2>&1
rc=$?; echo "== pfG Fp8TmaTest.* rc $rc: $(grep -E '^\[  (PASSED|FAILED)' "$O/conf.pfG.log" | tr '\n' ' ')"
grep -E "n192 vs wide|scales smem vs loads" "$O/conf.pfG.log" | head -20
if [ "$rc" != 0 ] || ! grep -q "^\[  PASSED  \]" "$O/conf.pfG.log" || grep -q "^\[  FAILED  \]" "$O/conf.pfG.log"; then
  grep -E "FAILED|Failure|error" -A3 "$O/conf.pfG.log" | head -30; grep -E "^\[fp8\]" "$O/conf.pfG.log" | tail -2
  timeout 200 /usr/local/cuda/bin/compute-sanitizer --print-limit 4 "$B" --gtest_filter=Fp8TmaTest.GroupedGemm \
    > "$O/sanitizer.log" 2>&1
  echo "== sanitizer rc $?"; grep -E "=========" "$O/sanitizer.log" | head -12
  exit 0
fi
fp8_dsv3_ab "pfA pfG pfB" "pfG pfA"  # tools/device_bundle_env.sh (QUICK=1 unless set)
date -u
