#!/usr/bin/env bash
# Session 60, call D2 (H100 or H200). Bundle build-dev-lead/pfF.tar.xz: pfF = bd58fe9 + scale-smem.diff + the producer
# tail (the producer thread waits for the full barrier of the last stage it filled before it leaves, so that no
# weight-scale cp.async or its mbarrier arrival is in flight when it exits), pfE = without the tail (session 59's
# diff, which aborted in Fp8TmaTest.GroupedGemm with an illegal instruction), pfA = bd58fe9, pfB = bd58fe9 + session
# 58's L1 prefetch. Steps: pfF's Fp8TmaTest.* conformance (line-buffered); on failure the per-test runs of pfE and pfF
# with CUDA_LAUNCH_BLOCKING=1 and compute-sanitizer on pfF's GroupedGemm, then stop. Else pfE's GroupedGemm once
# (does it still fail?), then s59a.sh's timings with pfF in pfE's place (QUICK=1: two kernel-bench rounds, one
# layer round).
#   run: bash docs/perf/2026-12-07-s60/d2.sh, carry build-dev-lead/pfF.tar.xz
set -uo pipefail
NAME=pfF; O=${OUT:-/tmp/out.d2}; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
bin() { echo "/tmp/s/$1/bin/cuda_kernels_test"; }
timeout 300 stdbuf -oL -eL "$(bin pfF)" --gtest_filter='Fp8TmaTest.*' > "$O/conf.pfF.log" 2>&1
rc=$?; echo "== pfF Fp8TmaTest.* rc $rc: $(grep -E '^\[  (PASSED|FAILED)' "$O/conf.pfF.log" | tr '\n' ' ')"
grep -E "n192 vs wide|scales smem vs loads" "$O/conf.pfF.log" | head -20
if [ "$rc" != 0 ] || ! grep -q "^\[  PASSED  \]" "$O/conf.pfF.log" || grep -q "^\[  FAILED  \]" "$O/conf.pfF.log"; then
  grep -E "FAILED|Failure|error" -A3 "$O/conf.pfF.log" | head -30
  for b in pfF pfE; do
    for t in GroupedGemm ScaleSmemMatchesLoads GroupedGemmN192MatchesWide DenseGemm; do
      CUDA_LAUNCH_BLOCKING=1 timeout 120 stdbuf -oL -eL "$(bin $b)" --gtest_filter="Fp8TmaTest.$t" > "$O/$b.$t.log" 2>&1
      echo "== $b $t rc $?"; grep -E "^\[fp8\]" "$O/$b.$t.log" | tail -2
      grep -vE "^\[fp8\]" "$O/$b.$t.log" | grep -E "error|Failure|FAILED|Abort" | head -4
    done
  done
  timeout 240 /usr/local/cuda/bin/compute-sanitizer --print-limit 10 "$(bin pfF)" \
    --gtest_filter=Fp8TmaTest.GroupedGemm > "$O/sanitizer.log" 2>&1
  echo "== sanitizer rc $?"; grep -E "=========" "$O/sanitizer.log" | head -40
  exit 0
fi
for i in 1; do
  timeout 120 stdbuf -oL "$(bin pfE)" --gtest_filter=Fp8TmaTest.GroupedGemm > "$O/pfE.grouped.$i.log" 2>&1
  echo "== pfE GroupedGemm run $i rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$O/pfE.grouped.$i.log" | tr '\n' ' ')"
  grep -E "error" "$O/pfE.grouped.$i.log" | head -2; grep -E "^\[fp8\]" "$O/pfE.grouped.$i.log" | tail -1
done
QUICK=${QUICK:-1}
for r in $([ "$QUICK" = 1 ] && echo 1 2 || echo 1 2 3); do
  for b in pfA pfF pfB; do fp8_grouped_bench "$b" "$r"; done
done
for r in $([ "$QUICK" = 1 ] && echo 1 || echo 1 2); do
  for b in pfA pfF pfB; do layer "$b" "dsv3f8.$r" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; done
  for b in pfF pfA; do
    PENSTOCK_FP8_N192=1 layer "$b" "dsv3f8.n192.$r" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  done
done
date -u
