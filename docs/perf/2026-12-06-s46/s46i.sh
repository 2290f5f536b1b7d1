#!/usr/bin/env bash
# Session 46, call I (not run: no device time left; for the next session, any GPU): bundle s46i = fc2f292 +
# 2026-12-06-s46/moe_permute_bulk.patch (moe_permute's token-order copy by bulk copies: one cp.async.bulk load of the
# token row into shared memory and top_k bulk stores, with PENSTOCK_MOE_PERMUTE=bulk; the warp kernel otherwise),
# beside s46c (b07c22d's code). MoeOpTest with the bulk path first (it covers the token-order path's cases); then
# DeepSeek-V3 layer 3 at 16K, bf16 and native FP8 + --fp8-attention, bulk / warp interleaved in the same binary and
# s46c once: the permute scope. Nsight on both permute kernels (DRAM throughput; the warp kernel ran at 75%).
set -uo pipefail
NAME=s46i; O=/tmp/out.s46i; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s46i.tgz" *.log *.json *.txt 2>/dev/null; cd - > /dev/null; }
PENSTOCK_MOE_PERMUTE=bulk conformance "$P/bin/cuda_kernels_test" 'MoeOpTest.*' 150 || { save; echo "conformance did not pass: stopping"; exit 0; }
save
for round in 1 2; do
  for mode in bulk warp; do
    PENSTOCK_MOE_PERMUTE=$mode LAYER_REPS=6 layer s46i dsv3bf.$mode.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant
    PENSTOCK_MOE_PERMUTE=$mode LAYER_REPS=6 layer s46i dsv3f8.$mode.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  done
done
LAYER_REPS=6 layer s46c dsv3bf.base deepseek-v3.json 3:4 16384 --fp8-weights dequant
save
PENSTOCK_MOE_PERMUTE=bulk NCU_TIMEOUT=150 ncu_sass bulk permute_bulk "/tmp/s/s46i/bin/penstock_model_bench" \
  --config "$P/configs/deepseek-v3.json" --layers 3:4 --tokens 16384 --reps 1 --fp8-weights dequant
grep -E "DRAM Throughput|Duration" "$O/bulk.details.txt" | head -3
NCU_TIMEOUT=150 ncu_sass warp permute_scatter "/tmp/s/s46i/bin/penstock_model_bench" \
  --config "$P/configs/deepseek-v3.json" --layers 3:4 --tokens 16384 --reps 1 --fp8-weights dequant
grep -E "DRAM Throughput|Duration" "$O/warp.details.txt" | head -3
save
