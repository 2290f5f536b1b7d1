#!/usr/bin/env bash
# Session 22 debug: where the pair kernel faults (compute-sanitizer memcheck on the sparse MLA test).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s22a.tar.xz -C /tmp/s
P=/tmp/s/s22a
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
set -f
CUDA_LAUNCH_BLOCKING=1 timeout 120 compute-sanitizer --tool memcheck --show-backtrace device $P/bin/cuda_kernels_test --gtest_filter='MlaTcOpTest.Sparse*' 2>&1 | grep -v "^\[conf\]" | head -60
