#!/usr/bin/env bash
# Session 18, call D: the whole cuda_kernels_test at the session's final kernel code (kTmaDynCluster the default device
# kernel; tma_util.cuh / tile_util.cuh additions), with the s18c pack.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s18c.tar.xz -C /tmp/s
P=/tmp/s/s18c; O=$OUT/s18d; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_kernels_test
timeout 400 $P/bin/$t --gtest_filter='*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $O/$t.log | head -8
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "\[conf\].*FAIL" $O/$t.log | head -5
grep -E "^\[conf\]|PASSED|FAILED|OK \]|SKIPPED" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
