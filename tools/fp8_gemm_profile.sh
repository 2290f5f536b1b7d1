#!/usr/bin/env bash
# On the GPU machine: Nsight Compute on one case of the fp8 kernel bench (bench/kernels/fp8_gemm_bench.cc), every
# kernel of it (cuBLASLt's block-scaled FP8 GEMM, the cp.async kernel, the three TMA variants), then the kernel names
# and the metrics that tell a feed-bound GEMM from a tensor-bound one. Run from the repository root after sourcing
# tools/device_bundle_env.sh (P: the bundle with bin/penstock_bench_kernels, O: the results folder).
#   SHAPE="o 16384" T=16384 bash tools/fp8_gemm_profile.sh     # defaults: o_proj at T = 16384
# Written in session 27 (docs/perf/2026-12-04-s27.md section 5) without a GPU left to run it: check the kernel filter
# on its first run.
set -uo pipefail
: "${P:?source tools/device_bundle_env.sh first}" "${O:?}"
SHAPE=${SHAPE:-o 16384}
T=${T:-16384}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}; case '${SHAPE}' T ${T}"
[ -n "${NCU}" ] || exit 1
# The bench times each variant with 2 warm-up and 10 timed launches; profile the first timed launch of each kernel
# (the regex excludes the bench's fills and the activation quantiser).
PENSTOCK_FP8_BENCH_SHAPE="${SHAPE}" PENSTOCK_FP8_BENCH_T="${T}" timeout 500 "${NCU}" --clock-control none \
  -k 'regex:^(?!.*(fill|quant|convert|uniform)).*' --launch-skip 0 --launch-count 60 --set full --import-source no \
  -o "${O}/fp8prof" "${P}/bin/penstock_bench_kernels" --only fp8 > "${O}/fp8prof.log" 2>&1
echo "ncu rc $?"
tail -3 "${O}/fp8prof.log"
"${NCU}" -i "${O}/fp8prof.ncu-rep" --page details > "${O}/fp8prof.details.txt" 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Shared Memory|Registers Per Thread|Cluster Size|Grid Size|Block Size|Dynamic Shared" \
  "${O}/fp8prof.details.txt" | awk '!seen[$0]++' | head -150
