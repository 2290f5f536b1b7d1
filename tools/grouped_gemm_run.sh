#!/usr/bin/env bash
# The device grouped GEMM on one GPU machine (issue #7): its conformance tests (cuda_kernels_test, grouped / gemm
# filters, then the FP8 GEMM tests, which share the TMA helpers), then penstock_bench_kernels --only grouped (every
# device kernel vs the cuBLASLt path; only the old cp.async kernel when the conformance run failed, so that a hung
# kernel cannot eat the run) and torch._grouped_mm on the same offsets (tools/grouped_mm_baseline.py), in one run.
# Optional: GG_FP8=1 (the FP8 tests too), GG_NCU="kernel ..." (Nsight Compute sections of those kernels at
# DeepSeek-V3 gate_up T = 16384), GG_KNOBS="VAR=value ..." (the TMA kernels again under measurement knobs).
# Timeouts (s): GG_T_TEST (60), GG_T_FP8 (60), GG_T_BENCH (90), GG_T_TORCH (60), GG_T_NCU (30).
#   tools/grouped_gemm_run.sh pack   BUILD_DIR DEST      # here: stripped binaries + non-system libs -> DEST.tar.xz
#   PKG=DIR OUT=DIR tools/grouped_gemm_run.sh run        # there
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" = pack ]; then
  build=$2; dest=$3
  rm -rf "${dest}"
  bash "${ROOT}/tools/pack_kernel_bins.sh" "${build}" "${dest}"
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
  # One gtest run per device kernel, so that a failing (or hanging) kernel only drops itself from the bench.
  all="${GG_KERNELS:-tma_dyn tma tma_cluster tma_k32 ws_cp_async cp_async}"
  kernels=""
  for kn in ${all}; do
    timeout "${GG_T_TEST:-60}" "${PKG}/bin/cuda_kernels_test" \
      --gtest_filter="Kernels/GroupedGemmKernelTest.MatchesReference/${kn}" >"/tmp/gg_test_${kn}.log" 2>&1
    rc=$?
    grep -E '^\[grouped_gemm|FAILED|Failure|Expected|Which is|mismatch' "/tmp/gg_test_${kn}.log" | head -60
    echo "+ conformance ${kn} rc ${rc} $(date -u +%T)"
    [ "${rc}" = 0 ] && kernels="${kernels:+${kernels},}${kn}"
  done
  timeout "${GG_T_TEST:-60}" "${PKG}/bin/cuda_kernels_test" --gtest_filter='GroupedGemmDeviceTest.*:GemmOpTest*' 2>&1 |
    grep -vE '^\[ RUN|^\[       OK'
  rc=${PIPESTATUS[0]}
  echo "+ conformance default dispatch rc ${rc}; kernels passed: ${kernels}; bench $(date -u +%T)"
  mkdir -p "${OUT}/offsets"
  PENSTOCK_BENCH_GG_KERNELS="${kernels:-none}" PENSTOCK_GROUPED_OFFSETS_DIR="${OUT}/offsets" \
    timeout "${GG_T_BENCH:-90}" "${PKG}/bin/penstock_bench_kernels" --only grouped 2>&1
  echo "+ torch $(date -u +%T)"
  timeout "${GG_T_TORCH:-60}" python3 "${ROOT}/tools/grouped_mm_baseline.py" "${OUT}/offsets" 2>&1
  tar -C "${OUT}" -cf "${OUT}/offsets.tar" offsets && rm -rf "${OUT}/offsets"
  # The optional steps below stop starting once GG_BUDGET seconds (default 150) have passed.
  budget="${GG_BUDGET:-150}"
  if [ -n "${GG_FP8:-}" ] && [ "${SECONDS}" -lt "${budget}" ]; then
    echo "+ fp8 $(date -u +%T)"
    timeout "${GG_T_FP8:-60}" "${PKG}/bin/cuda_kernels_test" --gtest_filter='Fp8*' 2>&1 | grep -E '^\[ +(OK|FAILED|PASSED) |FAILED|Failure'
  fi
  # GG_KNOBS="VAR=value ...": the TMA kernels (GG_KNOB_KERNELS, default tma_cluster,tma) again under each setting
  # (PENSTOCK_GG_TMA_L2PROMO=none|128, PENSTOCK_GG_TMA_BBOX=256); records tagged "knob".
  for kv in ${GG_KNOBS:-}; do
    [ "${SECONDS}" -lt "${budget}" ] || break
    echo "+ bench ${kv} $(date -u +%T)"
    env "${kv}" PENSTOCK_BENCH_GG_KERNELS="${GG_KNOB_KERNELS:-tma_cluster,tma}" \
      timeout "${GG_T_BENCH:-90}" "${PKG}/bin/penstock_bench_kernels" --only grouped 2>&1 | sed "s/^{/{\"knob\":\"${kv}\",/"
  done
  # GG_NCU="k1 k2": Nsight Compute on the first launch of each listed device kernel at DeepSeek-V3 gate_up T = 16384.
  if [ -n "${GG_NCU:-}" ]; then
    ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for kn in ${GG_NCU}; do
      case ",${kernels}," in *",${kn},"*) ;; *) continue ;; esac
      [ "${SECONDS}" -lt "${budget}" ] || break
      echo "+ ncu ${kn} $(date -u +%T)"
      PENSTOCK_BENCH_GG_KERNELS="${kn}" PENSTOCK_BENCH_GG_CASE=deepseek_v3:gate_up:16384 \
        timeout "${GG_T_NCU:-30}" "${ncu_bin}" --clock-control none -k regex:grouped_gemm --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
        "${PKG}/bin/penstock_bench_kernels" --only grouped >"${OUT}/ncu_${kn}.txt" 2>&1
      grep -E 'Duration|Throughput|Hit Rate|Stall|Issued Warp|No Eligible' "${OUT}/ncu_${kn}.txt" | head -20
    done
  fi
  echo "+ end $(date -u +%T)"
} | tee "${OUT}/grouped_gemm.log"
python3 "${ROOT}/tools/grouped_gemm_table.py" "${OUT}/grouped_gemm.log" | tee "${OUT}/table.md"
