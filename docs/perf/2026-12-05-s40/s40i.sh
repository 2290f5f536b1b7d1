#!/usr/bin/env bash
# Session 40, call I: the FP8 and bf16 gated grouped GEMM tests after the test's refactor (bundle s40i).
set -uo pipefail
NAME=s40i; O=/tmp/out.s40i; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='GroupedGemmDeviceTest.Glu*:Fp8TmaTest.GroupedGemmGlu*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|\| FAIL|Failure|differ" | head -20
