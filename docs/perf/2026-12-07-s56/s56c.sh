#!/usr/bin/env bash
# Session 56, call C (any GPU): call B's side stream at a lower priority than the compute stream (bundle s56c), and
# where the MoE block joins its shared expert's fork: before the routed expert GEMMs (the default in s56c) or before
# the unpermute (PENSTOCK_MOE_LATE_JOIN=1, call B's place; an A/B switch of this bundle only). ForkCudaTest again,
# then interleaved rounds: DeepSeek-V3 layer 3 at 16K, bf16 (dequant) and native FP8 + FP8 attention, side stream off
# / on / on with the late join, 4 rounds; GLM-5.3 layer 6 (native FP8, FP8 indexer, fp8-accumulate) at 16K, off / on,
# 3 rounds, and at 64K, off / on, 2 rounds.
#   run: bash docs/perf/2026-12-07-s56/s56c.sh, carry build-dev-lead/s56c.tar.xz
set -uo pipefail
NAME=s56c; O=/tmp/out.s56c; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s56c.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
conformance "${P}/bin/cuda_runtime_test" 'ForkCudaTest.*:StreamTest.*' 120; save
d() {  # d TAG SIDE: both DeepSeek-V3 rows
  PENSTOCK_SIDE_STREAM=$2 LAYER_REPS=6 layer s56c "dsv3bf.$1" deepseek-v3.json 3:4 16384 \
    --fp8-weights dequant
  PENSTOCK_SIDE_STREAM=$2 LAYER_REPS=6 layer s56c "dsv3f8.$1" deepseek-v3.json 3:4 16384 --fp8-weights native \
    --fp8-attention
}
for r in 1 2 3 4; do
  d "off.$r" 0
  d "on.$r" 1
  export PENSTOCK_MOE_LATE_JOIN=1; d "late.$r" 1; unset PENSTOCK_MOE_LATE_JOIN
  save
done
g() { PENSTOCK_SIDE_STREAM=$3 LAYER_REPS=$4 LAYER_TIMEOUT=90 layer s56c "glm$1.$2" glm-5.3.json 6:7 "$1" \
  --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate; save; }
for r in 1 2 3; do g 16384 "off.$r" 0 6; g 16384 "on.$r" 1 6; done
for r in 1 2; do g 65536 "off.$r" 0 4; g 65536 "on.$r" 1 4; done
date -u
