#!/usr/bin/env bash
# On the GPU machine: Nsight Compute on one case of the fp8 kernel bench (bench/kernels/fp8_gemm_bench.cc), every
# kernel of it (cuBLASLt's block-scaled FP8 GEMM, the cp.async kernel, the three TMA variants), then the kernel names
# and the metrics that tell a feed-bound GEMM from a tensor-bound one. Run from the repository root after sourcing
# tools/device_bundle_env.sh (P: the bundle with bin/penstock_bench_kernels, O: the results folder).
#   SHAPE="o 16384" T=16384 bash tools/fp8_gemm_profile.sh     # defaults: o_proj at T = 16384
# First run: session 28 (docs/perf/2026-12-04-s28.md section 1).
# MODE=sass: per-instruction warp-stall samples (SourceCounters) of one TMA kernel variant instead, summarised by
# tools/ncu_sass_hotspots.py. The bench launches each variant 13 times (a checked call, 2 warm-up, 10 timed) in the
# order 128-wide, wide, pair, then the gated ones, so VARIANT picks the launch to skip to:
#   MODE=sass SHAPE="dsv3 down" VARIANT=wide bash tools/fp8_gemm_profile.sh     # VARIANT: n128, wide, pair
set -uo pipefail
: "${P:?source tools/device_bundle_env.sh first}" "${O:?}"
SHAPE=${SHAPE:-o 16384}
T=${T:-16384}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}; case '${SHAPE}' T ${T}"
[ -n "${NCU}" ] || exit 1
if [ "${MODE:-}" = sass ]; then
  case "${VARIANT:-wide}" in n128) skip=0 ;; wide) skip=13 ;; pair) skip=26 ;; *) echo "VARIANT: n128, wide or pair"; exit 1 ;; esac
  tag=sass.${VARIANT:-wide}
  PENSTOCK_FP8_BENCH_SHAPE="${SHAPE}" PENSTOCK_FP8_BENCH_T="${T}" timeout 300 "${NCU}" --clock-control none \
    -k regex:fp8_gemm_tma_kernel --launch-skip "${skip}" --launch-count 1 --section SourceCounters \
    --section WarpStateStats --section SpeedOfLight --import-source no -o "${O}/${tag}" \
    "${P}/bin/penstock_bench_kernels" --only fp8 > "${O}/${tag}.log" 2>&1
  echo "ncu rc $?"
  "${NCU}" -i "${O}/${tag}.ncu-rep" --page source --print-source sass --csv > "${O}/${tag}.csv" 2> "${O}/${tag}.err"
  python3 "$(dirname "$0")/ncu_sass_hotspots.py" "${O}/${tag}.csv"
  exit 0
fi
# Every launch of the case's kernels up to 60 (13 per variant: a checked call, 2 warm-up, 10 timed; the regex excludes
# the bench's fills and the activation quantiser). Session 28's o_proj run took 226 s.
PENSTOCK_FP8_BENCH_SHAPE="${SHAPE}" PENSTOCK_FP8_BENCH_T="${T}" timeout 500 "${NCU}" --clock-control none \
  -k 'regex:^(?!.*(fill|quant|convert|uniform)).*' --launch-skip 0 --launch-count 60 --set full --import-source no \
  -o "${O}/fp8prof" "${P}/bin/penstock_bench_kernels" --only fp8 > "${O}/fp8prof.log" 2>&1
echo "ncu rc $?"
tail -3 "${O}/fp8prof.log"
"${NCU}" -i "${O}/fp8prof.ncu-rep" --page details > "${O}/fp8prof.details.txt" 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Shared Memory|Registers Per Thread|Cluster Size|Grid Size|Block Size|Dynamic Shared" \
  "${O}/fp8prof.details.txt" | awk '!seen[$0]++' | head -150
