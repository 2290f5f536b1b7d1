#!/usr/bin/env bash
# Session 55, call C (any GPU): bundle s55c (pack_s55b.sh's build of the code with both gather forms). Call B found
# the cp.async gather bit-exact but slower (gate_up_act 15.2 vs 12.2 ms); this call adds the row-box TMA gather
# (the default form) and A/Bs all three in the DeepSeek-V3 bf16 layer. Phases, each saving s55c.tgz:
# 1. conformance as call B (both forms against moe_permute + the kernel, bit for bit); stops on a failure;
# 2. DeepSeek-V3 layer 3 at 16K, bf16: PENSTOCK_GG_GATHER 1 (TMA rows) / 0 (permute first) / cp_async, 3 rounds
#    in rotated order; then GLM-5.3 layer 6 at 16K, 1 / 0 / 0 / 1.
#   run: bash docs/perf/2026-12-07-s55/s55c.sh, carry build-dev-lead/s55c.tar.xz
set -uo pipefail
NAME=s55c; O=/tmp/out.s55c; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s55c.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" \
  'GroupedGemmDeviceTest.Glu*:GroupedGemmDeviceTest.TmaDyn*:GroupedGemmKernelTest*tma_dyn*:MoeOpTest.*' 240 \
  || { grep -E 'differ|FAILED|Failure|mismatch' "$O/conf.log" | grep -v "mismatches 0 " | head -12; save; exit 0; }
grep -E "gather" "$O/conf.log" | head -16
save
ds() { PENSTOCK_GG_GATHER=$1 layer s55c "dsv3bf.g$1.$2" deepseek-v3.json 3:4 16384 --fp8-weights dequant; save; }
ds 1 1; ds 0 1; ds cp_async 1; ds 0 2; ds cp_async 2; ds 1 2; ds cp_async 3; ds 1 3; ds 0 3
glm() { PENSTOCK_GG_GATHER=$1 layer s55c "glm.g$1.$2" glm-5.3.json 6:7 16384 --fp8-weights dequant; save; }
glm 1 1; glm 0 1; glm 0 2; glm 1 2
