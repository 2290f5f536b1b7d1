#!/usr/bin/env bash
# Session 26, call H: the whole cuda_kernels_test and cuda_runtime_test on the session's final kernel code (f6b5439).
set -uo pipefail
N=${NAME:-s26h}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/out.$N; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
timeout 300 $P/bin/cuda_kernels_test > $O/kernels.log 2>&1
echo "cuda_kernels_test rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/kernels.log | tr '\n' ' '); $(grep -c '| PASS' $O/kernels.log) PASS, $(grep -c '| FAIL' $O/kernels.log) FAIL conformance lines"
grep -E "^\[  FAILED|\| FAIL" $O/kernels.log | head
timeout 120 $P/bin/cuda_runtime_test > $O/runtime.log 2>&1
echo "cuda_runtime_test rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/runtime.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $O/runtime.log | head
cd $O && tar czf ${OUT:-/tmp}/$N.tgz *
