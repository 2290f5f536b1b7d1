#!/usr/bin/env bash
# One-command GPU check (docs/perf/README.md): configures a CUDA build for Hopper (sm_90a), builds the GPU tests and
# the kernel benchmarks, runs every ctest labelled gpu, and writes the whole log to $OUT/gpu_check.log.
#   tools/gpu_check.sh                 # build dir build-gpu-check, log in ./out/gpu_check.log
#   OUT=/tmp/o BUILD=build-x JOBS=8 tools/gpu_check.sh
#   PENSTOCK_CUDA_PERF=1 tools/gpu_check.sh   # also times the DSA/KDA ops ([perf] lines in the log)
# Exit status: ctest's (non-zero when a configure/build step fails or any gpu test fails).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-./out}"
BUILD="${BUILD:-${ROOT}/build-gpu-check}"
JOBS="${JOBS:-16}"
ARCH="${CUDA_ARCH:-90a}"
mkdir -p "${OUT}"
LOG="$(cd "${OUT}" && pwd)/gpu_check.log"
: >"${LOG}"

run() {
  echo "+ $*" | tee -a "${LOG}"
  "$@" 2>&1 | tee -a "${LOG}"
  return "${PIPESTATUS[0]}"
}

{
  echo "# penstock gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  commit="$(git -C "${ROOT}" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
  git -C "${ROOT}" diff --quiet 2>/dev/null || commit="${commit} (dirty)"
  echo "# commit ${commit}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "# nvidia-smi: none"
  nvcc --version 2>/dev/null | tail -1 || true
} | tee -a "${LOG}"

if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "# WARNING: no GPU visible: every gpu test case will GTEST_SKIP (ctest still reports Passed)" | tee -a "${LOG}"
fi

run cmake -S "${ROOT}" -B "${BUILD}" -DPENSTOCK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${ARCH}" -DCMAKE_BUILD_TYPE=Release
run cmake --build "${BUILD}" -j"${JOBS}" --target cuda_kernels_test cuda_runtime_test penstock_bench_kernels
cd "${BUILD}"
run ctest -L gpu --output-on-failure
echo "# gpu_check: all gpu tests passed; log ${LOG}" | tee -a "${LOG}"
