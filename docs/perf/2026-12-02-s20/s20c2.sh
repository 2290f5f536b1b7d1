#!/usr/bin/env bash
# Session 20, call C2: the whole cuda_kernels_test on call C's binary (s20c, kernel code of 318aa62; COMMIT file 79d9dc0), which call C's script
# skipped (its filter `*` was glob-expanded).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s20c.tar.xz -C /tmp/s; P=/tmp/s/s20c; O=$OUT/s20c2; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu; echo "commit $(cat $P/COMMIT)"
timeout 280 $P/bin/cuda_kernels_test --gtest_filter='*' > $O/t.log 2>&1; echo "cuda_kernels_test rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/t.log | head -8
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/t.log)"
grep -E "OK \]|PASSED|FAILED|\[conf\]|\[fp8\]|Failure|Which is|differ" $O/t.log > $O/cuda_kernels_test.conf.log; rm $O/t.log
