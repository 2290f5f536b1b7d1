#!/usr/bin/env bash
# The device grouped GEMM on one GPU machine (issue #7): its conformance tests (cuda_kernels_test, grouped / gemm
# filters, then the FP8 GEMM tests, which share the TMA helpers), then penstock_bench_kernels --only grouped (every
# device kernel vs the cuBLASLt path; only the old cp.async kernel when the conformance run failed, so that a hung
# kernel cannot eat the run) and torch._grouped_mm on the same offsets (tools/grouped_mm_baseline.py), in one run.
# Timeouts (s): GG_T_TEST (60), GG_T_FP8 (60), GG_T_BENCH (90), GG_T_TORCH (60).
#   tools/grouped_gemm_run.sh pack   BUILD_DIR DEST      # here: stripped binaries + non-system libs -> DEST.tar.xz
#   PKG=DIR OUT=DIR tools/grouped_gemm_run.sh run        # there
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" = pack ]; then
  build=$2; dest=$3
  rm -rf "${dest}"; mkdir -p "${dest}/bin" "${dest}/lib"
  cp "${build}/tests/kernels/cuda/cuda_kernels_test" "${build}/bench/penstock_bench_kernels" "${dest}/bin/"
  strip "${dest}/bin/"*
  skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libpthread|/libdl\.so|/librt\.so|libcuda\.so|libcudart|libcublas|libnccl|libnvidia|libcudnn|libnvrtc'
  for b in "${dest}/bin/"*; do ldd "${b}" | awk '/=> \//{print $3}' | grep -v -E "${skip}" | while read -r l; do cp -L "${l}" "${dest}/lib/"; done; done
  git -C "${ROOT}" rev-parse --short=12 HEAD >"${dest}/COMMIT"
  tar -C "$(dirname "${dest}")" -cJf "${dest}.tar.xz" "$(basename "${dest}")"
  du -sh "${dest}" "${dest}.tar.xz"
  exit 0
fi
OUT="${OUT:-./out}"; mkdir -p "${OUT}"
PKG="${PKG:?PKG=folder}"
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH="${PKG}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
{
  echo "# grouped_gemm_run $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(cat "${PKG}/COMMIT")"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  echo "+ conformance $(date -u +%T)"
  timeout "${GG_T_TEST:-60}" "${PKG}/bin/cuda_kernels_test" --gtest_filter='GroupedGemmDevice*:GemmOpTest*' 2>&1
  rc=$?
  echo "+ conformance rc ${rc}; fp8 $(date -u +%T)"
  timeout "${GG_T_FP8:-60}" "${PKG}/bin/cuda_kernels_test" --gtest_filter='Fp8*' 2>&1 | grep -E '^\[ +(OK|FAILED|PASSED) |FAILED|Failure' 
  echo "+ bench $(date -u +%T)"
  mkdir -p "${OUT}/offsets"
  kernels="${GG_KERNELS:-tma_cluster,tma,cp_async}"
  [ "${rc}" = 0 ] || kernels=cp_async
  PENSTOCK_BENCH_GG_KERNELS="${kernels}" PENSTOCK_GROUPED_OFFSETS_DIR="${OUT}/offsets" \
    timeout "${GG_T_BENCH:-90}" "${PKG}/bin/penstock_bench_kernels" --only grouped 2>&1
  echo "+ torch $(date -u +%T)"
  timeout "${GG_T_TORCH:-60}" python3 "${ROOT}/tools/grouped_mm_baseline.py" "${OUT}/offsets" 2>&1
  echo "+ end $(date -u +%T)"
} | tee "${OUT}/grouped_gemm.log"
