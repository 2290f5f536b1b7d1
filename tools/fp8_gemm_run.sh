#!/usr/bin/env bash
# The FP8 GEMMs on one GPU machine (issue #7 "FP8 paths"): their conformance tests (cuda_kernels_test Fp8Test.*, then
# Fp8TmaTest.* on its own: the bench leaves the TMA kernel out when those fail or hang), then
# penstock_bench_kernels --only fp8 (act-quant, dense cuBLASLt / wgmma / bf16, grouped wgmma / bf16) and
# tools/fp8_gemm_baseline.py (torch._scaled_mm blockwise + rowwise, bf16, torch._grouped_mm, torch._scaled_grouped_mm)
# on the same shapes and expert offsets, in one run.
#   tools/fp8_gemm_run.sh pack BUILD_DIR DEST     # here: stripped binaries + non-system libs + these scripts -> DEST
#   PKG=DIR OUT=DIR DEST/fp8_gemm_run.sh run      # there (reads only PKG)
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ "${1:-}" = pack ]; then
  build=$2; dest=$3
  rm -rf "${dest}"
  bash "${HERE}/pack_kernel_bins.sh" "${build}" "${dest}"
  cp "${HERE}/fp8_gemm_run.sh" "${HERE}/fp8_gemm_baseline.py" "${dest}/"
  git -C "${HERE}/.." rev-parse --short=12 HEAD >"${dest}/COMMIT"
  du -sh "${dest}"
  exit 0
fi
OUT="${OUT:-./out}"; mkdir -p "${OUT}"
PKG="${PKG:?PKG=folder}"
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH="${PKG}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p "${OUT}/offsets"
{
  echo "# fp8_gemm_run $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(cat "${PKG}/COMMIT")"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  echo "+ conformance $(date -u +%T)"
  timeout 100 "${PKG}/bin/cuda_kernels_test" --gtest_filter='Fp8Test.*' 2>&1 | grep -v '^\[       OK \]'
  echo "+ conformance, TMA kernel and default dispatch $(date -u +%T)"
  timeout 60 "${PKG}/bin/cuda_kernels_test" --gtest_filter='Fp8TmaTest.*' >"${OUT}/tma_test.txt" 2>&1
  tma_rc=$?
  grep -v '^\[       OK \]' "${OUT}/tma_test.txt"; rm -f "${OUT}/tma_test.txt"
  skip_tma=0; [ "${tma_rc}" = 0 ] || skip_tma=1
  echo "+ bench $(date -u +%T) (TMA tests rc ${tma_rc}; PENSTOCK_FP8_SKIP_TMA=${skip_tma})"
  PENSTOCK_FP8_SKIP_TMA=${skip_tma} PENSTOCK_FP8_OFFSETS_DIR="${OUT}/offsets" timeout 100 \
    "${PKG}/bin/penstock_bench_kernels" --only fp8 2>&1 | tee "${OUT}/fp8_bench.jsonl"
  echo "+ torch $(date -u +%T)"
  timeout 90 python3 "${PKG}/fp8_gemm_baseline.py" "${OUT}/offsets" 2>&1 | tee "${OUT}/fp8_torch.jsonl"
  echo "+ end $(date -u +%T)"
} >"${OUT}/fp8_gemm.log" 2>&1
rm -rf "${OUT}/offsets"
# The reply carries the log's tail: a compact table last.
python3 - "${OUT}/fp8_bench.jsonl" "${OUT}/fp8_torch.jsonl" <<'PY' | tee -a "${OUT}/fp8_gemm.log"
import json, sys
for path in sys.argv[1:]:
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "bench" not in r:
            continue
        v = r.get("variant", r.get("shape", ""))
        tf = r.get("tflops")
        extra = r.get("error", "") or ""
        if r["bench"] == "fp8_act_quant":
            print(f"actq {r.get('shape','')[:14]:14s} T{r.get('rows')} {r.get('time_us', 0):.0f}us {r.get('gbps', 0):.0f} GB/s")
            continue
        print(f"{r['bench'][:9]:9s} {r.get('shape','')[:16]:16s} T{r.get('tokens')} {v[:30]:30s} "
              + (f"{tf:7.1f}" if tf else "   -   ") + f" {extra[:60]}")
PY
