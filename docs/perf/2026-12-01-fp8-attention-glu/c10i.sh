#!/usr/bin/env bash
# Session 10, call I: the grouped GEMM tests after both TMA entry points share one operand-map helper.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s10.tar.xz -C /tmp/s; P=/tmp/s/s10
O=/tmp/c10i; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
timeout 200 $P/bin/cuda_kernels_test --gtest_filter='*GroupedGemm*:MoeOpTest.*' > $O/gg_test.log 2>&1; echo "gg test rc $? ($(grep -c '| PASS' $O/gg_test.log) conf PASS, $(grep -c '| FAIL' $O/gg_test.log) FAIL)"
grep -E "^\[  PASSED|FAILED|tests ran" $O/gg_test.log | head -10
tar -C /tmp -cJf $OUT/c10i.tar.xz c10i
