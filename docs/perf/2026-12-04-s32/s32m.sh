#!/usr/bin/env bash
# Session 32, call M: the final code (c6ef7ef's kernels, bundle s32m) through the whole cuda_kernels_test and
# cuda_runtime_test.
set -uo pipefail
NAME=s32m; O=/tmp/out.s32m; source tools/device_bundle_env.sh
for t in cuda_kernels_test cuda_runtime_test; do
  timeout 280 $P/bin/$t > $O/$t.log 2>&1
  echo "$t rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/$t.log | tr '\n' ' '); $(grep -c '| PASS' $O/$t.log) PASS, $(grep -c '| FAIL' $O/$t.log) FAIL conformance lines"
  grep -E "^\[  FAILED|\| FAIL|hangs" $O/$t.log | head -8
done
cd $O && tar czf ${OUT:-/tmp}/s32m.tgz *.log
