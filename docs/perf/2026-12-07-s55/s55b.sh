#!/usr/bin/env bash
# Session 55, call B (any GPU): bundle s55b. The bf16 MoE's gate/up GEMM reading the token rows through sorted_pairs
# (the fused kernel's kGather producer) instead of a permuted copy. Phases, each saving s55b.tgz:
# 1. conformance: the gather's bit-exactness (GluGatherIsBitExactWithPermute), the fused GLU and dynamic kernels'
#    tests, the MoE ops; stops on a failure;
# 2. DeepSeek-V3 layer 3 at 16K, bf16 (--fp8-weights dequant), PENSTOCK_GG_GATHER 1 / 0 in the order 1 0 0 1 1 0
#    (0: the op permutes into scratch and runs the plain fused kernel, what the layer did before);
# 3. GLM-5.3 layer 6 at 16K, bf16, 1 0 0 1; the FP8 DeepSeek-V3 row (unchanged path) once.
#   run: bash docs/perf/2026-12-07-s55/s55b.sh, carry build-dev-lead/s55b.tar.xz
set -uo pipefail
NAME=s55b; O=/tmp/out.s55b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s55b.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" \
  'GroupedGemmDeviceTest.Glu*:GroupedGemmDeviceTest.TmaDyn*:GroupedGemmKernelTest*tma_dyn*:MoeOpTest.*' 240 \
  || { grep -E 'differ|FAILED|Failure|mismatch' "$O/conf.log" | head -12; save; exit 0; }
grep -E "gather" "$O/conf.log" | head -12
save
ds() { PENSTOCK_GG_GATHER=$1 layer s55b "dsv3bf.g$1.$2" deepseek-v3.json 3:4 16384 --fp8-weights dequant; save; }
ds 1 1; ds 0 1; ds 0 2; ds 1 2; ds 1 3; ds 0 3
glm() { PENSTOCK_GG_GATHER=$1 layer s55b "glm.g$1.$2" glm-5.3.json 6:7 16384 --fp8-weights dequant; save; }
glm 1 1; glm 0 1; glm 0 2; glm 1 2
layer s55b dsv3f8.1 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; save
