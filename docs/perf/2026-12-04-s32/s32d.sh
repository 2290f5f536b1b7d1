#!/usr/bin/env bash
# Session 32, call D: bundle s32d (the gather as one-row TMA boxes issued by the producer's lead warp, each row at its
# place in the stage; calls A-C's cp.async gather dropped) against s31g (984e7cf). Tests: the grouped GEMM and MoE
# suites of cuda_kernels_test on s32d. Then the bf16 layers at 16K, alternated: DeepSeek-V3 three rounds, GLM-5.3
# and Kimi K3's KDA layer one each.
set -uo pipefail
NAME=s32d; O=/tmp/out.s32d; source tools/device_bundle_env.sh
timeout 300 $P/bin/cuda_kernels_test --gtest_filter='GroupedGemm*:*Moe*:*moe*' > $O/kernels_test.log 2>&1
echo "cuda_kernels_test rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/kernels_test.log | tr '\n' ' '); $(grep -c '| PASS' $O/kernels_test.log) PASS, $(grep -c '| FAIL' $O/kernels_test.log) FAIL conformance lines"
grep -E "^\[  FAILED|\| FAIL|hangs" $O/kernels_test.log | head -8
B="s32d s31g"
for round in 1 2 3; do
  for b in $B; do layer $b dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant; done
done
for b in $B; do layer $b glmbf glm-5.3.json 6:7 16384 --fp8-weights dequant; done
for b in $B; do layer $b k3kdabf kimi-k3.json 1:2 16384 --fp8-weights dequant; done
cd $O && tar czf ${OUT:-/tmp}/s32d.tgz *.log *.json
