#!/usr/bin/env bash
# Session 18, call F (commit 0762d2a, the session's final kernel code: cluster occupancy through one helper, the FP8
# pair kernel's fallback, kTmaDynCluster default, FP8 pairs above 384 rows per group): the grouped bf16 and FP8 GEMM
# tests, default and with PENSTOCK_FP8_PAIR=1 (every FP8 grouped call on the pairs).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s18f.tar.xz -C /tmp/s
P=/tmp/s/s18f; O=$OUT/s18f; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_kernels_test
F='Fp8Test.*Gemm*:Fp8TmaTest.*:Kernels/GroupedGemmKernelTest.*:GroupedGemmDeviceTest.*'
timeout 100 $P/bin/$t --gtest_filter="$F" > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -6; echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
PENSTOCK_FP8_PAIR=1 timeout 60 $P/bin/$t --gtest_filter='Fp8TmaTest.*' > $O/$t.pair.log 2>&1; echo "$t (FP8 pairs forced) rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.pair.log | head -6
grep -E "OK \]|PASSED|FAILED|\[conf\]" $O/$t.log > $O/$t.conf.log; grep -E "OK \]|PASSED|FAILED" $O/$t.pair.log > $O/$t.pair.conf.log; rm $O/$t.log $O/$t.pair.log
