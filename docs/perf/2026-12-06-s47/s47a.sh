#!/usr/bin/env bash
# Session 47, call A (any GPU): session 46's two unrun scripts in one call. First s46h.sh (Nsight Compute L2 / DRAM
# throughput of the bf16 and FP8 attention kernels and their MMA-only probes in the DeepSeek-V3 layer at 16K, bundle
# s46c = b07c22d's code), then a shortened s46i.sh (bundle s46i = fc2f292 + moe_permute_bulk.patch: MoeOpTest with
# PENSTOCK_MOE_PERMUTE=bulk, then one interleaved bulk / warp round of the bf16 layer and Nsight on both permutes).
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
mkdir -p "${OUT:-/tmp}"
# s46h.sh with bundle s46i (its attention code is s46c's; the carry limit takes one bundle)
sed 's/^NAME=s46c;/NAME=s46i;/' docs/perf/2026-12-06-s46/s46h.sh > /tmp/s46h.sh
OUT=${OUT:-/tmp} bash /tmp/s46h.sh
echo "s46h done at ${SECONDS}s"
[ "${SECONDS}" -lt 380 ] || exit 0
NAME=s46i; O=/tmp/out.s46i; source tools/device_bundle_env.sh
save() { cd "$O" && tar czf "${OUT:-/tmp}/s46i.tgz" *.log *.json *.txt 2>/dev/null; cd - > /dev/null; }
PENSTOCK_MOE_PERMUTE=bulk conformance "$P/bin/cuda_kernels_test" 'MoeOpTest.*' 100 || { save; echo "conformance did not pass: stopping"; exit 0; }
save
for mode in bulk warp; do
  PENSTOCK_MOE_PERMUTE=$mode LAYER_REPS=6 layer s46i dsv3bf.$mode.1 deepseek-v3.json 3:4 16384 --fp8-weights dequant
done
save
[ "${SECONDS}" -lt 500 ] || exit 0
PENSTOCK_MOE_PERMUTE=bulk NCU_TIMEOUT=60 ncu_sass bulk permute_bulk "/tmp/s/s46i/bin/penstock_model_bench" \
  --config "$P/configs/deepseek-v3.json" --layers 3:4 --tokens 16384 --reps 1 --fp8-weights dequant
grep -E "DRAM Throughput|Duration" "$O/bulk.details.txt" | head -3
save
