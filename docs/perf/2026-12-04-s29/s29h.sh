#!/usr/bin/env bash
# Session 29, call H: the final build (the persistent FP8 attention kernel, an item at a time; the bf16 kernel one
# CTA per item as before): the whole cuda_kernels_test, cuda_attention_cudnn_test and cuda_runtime_test.
set -uo pipefail
NAME=s29h; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for t in cuda_attention_cudnn_test cuda_kernels_test cuda_runtime_test; do
  timeout 280 $P/bin/$t > $O/$t.log 2>&1
  echo "$t rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/$t.log | tr '\n' ' '); $(grep -c '| PASS' $O/$t.log) PASS, $(grep -c '| FAIL' $O/$t.log) FAIL conformance lines"
  grep -E "^\[  FAILED|\| FAIL" $O/$t.log | head -5
done
cd $O && tar czf ${OUT:-/tmp}/s29h.tgz *.log
