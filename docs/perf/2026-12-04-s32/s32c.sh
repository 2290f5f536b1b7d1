#!/usr/bin/env bash
# Session 32, call C: why the gathered gate/up GEMM (s32b) runs 2.1 ms slower than the TMA one on permuted rows.
# Bundle s32c = s32b with measurement knobs (PENSTOCK_GG_GATHER: bit 0 drops the consumers' proxy fence, bit 1 adds
# an L2::256B prefetch hint to the gather's cp.async), against s31g; DeepSeek-V3's bf16 layer at 16K, two rounds.
set -uo pipefail
NAME=s32c; O=/tmp/out.s32c; source tools/device_bundle_env.sh
for round in 1 2; do
  for k in 0 1 2 3; do PENSTOCK_GG_GATHER=$k layer s32c dsv3bf.$round.k$k deepseek-v3.json 3:4 16384 --fp8-weights dequant; done
  layer s31g dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant
done
cd $O && tar czf ${OUT:-/tmp}/s32c.tgz *.log *.json
