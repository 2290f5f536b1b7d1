#!/usr/bin/env bash
# The DSA indexer logits + top-k on one GPU machine (issue #7): conformance (cuda_kernels_test, the DsaOpTest indexer
# and top-k cases against the CPU reference), then penstock_bench_kernels --only dsa (wgmma vs mma kernel, top-k, at
# GLM-5.3 dims, T = 4K / 16K / 64K) and the same logits in torch (tools/dsa_indexer_torch_baseline.py), in one run.
#   tools/dsa_indexer_run.sh pack BUILD_DIR DEST       # here: stripped binaries + non-system libs -> DEST.tar.xz
#   PKG_TAR=FILE OUT=DIR tools/dsa_indexer_run.sh run   # there (unpacks PKG_TAR into a temporary folder)
# The pack also copies this script and the torch baseline into DEST's parent, so a device call that only carries
# that folder can run `bash DEST_PARENT/dsa_indexer_run.sh run` (TORCH_SCRIPT defaults to the copy beside it).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" = pack ]; then
  build=$2; dest=$3
  rm -rf "${dest}"
  bash "${ROOT}/tools/pack_kernel_bins.sh" "${build}" "${dest}"
  git -C "${ROOT}" rev-parse --short=12 HEAD >"${dest}/COMMIT"
  git -C "${ROOT}" diff --quiet HEAD -- src tests bench || echo "+dirty" >>"${dest}/COMMIT"
  tar -C "$(dirname "${dest}")" -cJf "${dest}.tar.xz" "$(basename "${dest}")"
  cp "${ROOT}/tools/dsa_indexer_run.sh" "${ROOT}/tools/dsa_indexer_torch_baseline.py" "$(dirname "${dest}")/"
  rm -rf "${dest}"
  du -sh "${dest}.tar.xz"
  exit 0
fi
OUT="${OUT:-./out}"; mkdir -p "${OUT}"
PKG_TAR="${PKG_TAR:?PKG_TAR=file}"
work="$(mktemp -d)"
tar -C "${work}" -xJf "${PKG_TAR}"
PKG="$(ls -d "${work}"/*/ | head -1)"
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH="${PKG}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
{
  echo "# dsa_indexer_run $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(tr '\n' ' ' <"${PKG}/COMMIT")"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  echo "+ conformance $(date -u +%T)"
  timeout "${CONF_TIMEOUT:-60}" "${PKG}/bin/cuda_kernels_test" --gtest_filter='DsaOpTest.Indexer*:DsaOpTest.Topk*' 2>&1
  conf_rc=$?
  echo "+ conformance rc ${conf_rc}; bench $(date -u +%T)"
  if [ "${conf_rc}" -eq 124 ]; then
    echo "conformance timed out (a hang?): bench skipped"
  else
    timeout "${BENCH_TIMEOUT:-70}" "${PKG}/bin/penstock_bench_kernels" --only dsa 2>&1
    echo "+ bench rc $?"
  fi
  echo "+ torch $(date -u +%T)"
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  torch_script="${TORCH_SCRIPT:-${here}/dsa_indexer_torch_baseline.py}"
  timeout "${TORCH_TIMEOUT:-55}" python3 "${torch_script}" 2>&1
  echo "+ end $(date -u +%T)"
} | tee "${OUT}/dsa_indexer.log"
