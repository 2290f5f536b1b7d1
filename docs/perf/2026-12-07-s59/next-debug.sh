#!/usr/bin/env bash
# Prepared in session 59 for the next device call (not run: the session's device time was spent on failed starts):
# find what raised "illegal instruction" in Fp8TmaTest.GroupedGemm with scale-smem.diff (session 59's call A), then
# time it. The dense cases (one tile per CTA, 4-300 rows) passed with it; the lead is a CTA's second tile (or the graph
# case, GroupedGemm's only case with several tiles per CTA on the new path).
# Bundle (build, then pack): NAME=pfE from HEAD + `git apply docs/perf/2026-12-07-s59/scale-smem.diff`
# (pfA = HEAD and pfB = HEAD + the src part of 2026-12-07-s58/next-scale-prefetch.diff as same-run baselines):
#   BUNDLE_BINS="penstock_model_bench penstock_bench_kernels cuda_kernels_test" tools/pack_session_bundle.sh build-cuda pfE "..." pfA pfB
# Steps: each Fp8TmaTest test on its own with CUDA_LAUNCH_BLOCKING=1 and line-buffered stdout (call A lost the
# [fp8] lines of GroupedGemm in the stdout buffer when the check aborted, so the failing case and variant are not
# known), GroupedGemm with PENSTOCK_FP8_SCALE_SMEM=0 (the loads; must pass, as pfA does), then compute-sanitizer on
# GroupedGemm. If every test passes, s59a.sh's timings follow (QUICK=1 when little device time is left).
#   run: bash docs/perf/2026-12-07-s59/next-debug.sh, carry build-dev-lead/pfE.tar.xz
set -uo pipefail
NAME=pfE; O=/tmp/out.dbg; source tools/device_bundle_env.sh
B=/tmp/s/pfE/bin/cuda_kernels_test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
save() { cd "$O" && tar czf "${OUT:-/tmp}/dbg.tgz" *.log 2>/dev/null; cd - > /dev/null; }
fails=0
for t in GroupedGemm ScaleSmemMatchesLoads GroupedGemmN192MatchesWide GroupedGemmGluBitExact DenseGemm \
         GroupedGemmTailHeavyRoutingFinishes; do
  CUDA_LAUNCH_BLOCKING=1 timeout 120 stdbuf -oL "$B" --gtest_filter="Fp8TmaTest.$t" > "$O/$t.log" 2>&1
  rc=$?; echo "== $t rc $rc"; [ "$rc" = 0 ] || fails=1
  grep -E "^\[fp8\]" "$O/$t.log" | tail -2; grep -vE "^\[fp8\]" "$O/$t.log" | grep -E "error|Failure|FAILED|Abort" | head -4
  save
done
PENSTOCK_FP8_SCALE_SMEM=0 timeout 120 stdbuf -oL "$B" --gtest_filter=Fp8TmaTest.GroupedGemm > "$O/loads.log" 2>&1
echo "== GroupedGemm with the loads rc $?"; save
if [ "$fails" = 1 ]; then
  timeout 240 /usr/local/cuda/bin/compute-sanitizer --print-limit 20 "$B" --gtest_filter=Fp8TmaTest.GroupedGemm \
    > "$O/sanitizer.log" 2>&1
  echo "== sanitizer rc $?"; grep -E "=========" "$O/sanitizer.log" | head -30; save
  exit 0
fi
QUICK=${QUICK:-0} bash docs/perf/2026-12-07-s59/s59a.sh
