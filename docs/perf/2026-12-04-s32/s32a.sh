#!/usr/bin/env bash
# Session 32, call A: bundle s32a (the MoE row permutation fused into the bf16 gated expert GEMM's A loads:
# GroupedGluGemmParams::a_rows, a cp.async gather by the producer warpgroup) against s31g (984e7cf). Tests: the grouped
# GEMM suite of cuda_kernels_test on s32a (GluGatheredRowsIsBitExactWithPermuted is new). Then the bf16 layers at 16K,
# alternated: DeepSeek-V3 three rounds, GLM-5.3 two, Kimi K3's KDA layer one.
set -uo pipefail
NAME=s32a; O=${OUT:-/tmp/out.s32a}; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
timeout 300 $P/bin/cuda_kernels_test --gtest_filter='GroupedGemm*:*Moe*:*moe*' > $O/kernels_test.log 2>&1
echo "cuda_kernels_test rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/kernels_test.log | tr '\n' ' '); $(grep -c '| PASS' $O/kernels_test.log) PASS, $(grep -c '| FAIL' $O/kernels_test.log) FAIL conformance lines"
grep -E "^\[  FAILED|\| FAIL|hangs" $O/kernels_test.log | head -8
grep -E "gathered" $O/kernels_test.log | head -12
B="s32a s31g"
for round in 1 2 3; do
  for b in $B; do layer $b dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant; done
done
for round in 1 2; do
  for b in $B; do layer $b glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant; done
done
for b in $B; do layer $b k3kdabf kimi-k3.json 1:2 16384 --fp8-weights dequant; done
