#!/usr/bin/env bash
# Session 35 (no device lent), for a later session's device call: the layer breakdowns `penstock plan --calibrate`
# needs beyond the 16K ones it has (docs/design/planner.md "Calibration"): 4K and 8K chunks, an 8K chunk after an 8K
# prefix (the second chunk of the Deep-PP study's 16K prompts), for each family and weight format. About 3-4 minutes.
# Bundle: build penstock_model_bench at the session's HEAD and pack it (tools/pack_session_bundle.sh build-cuda s35a
# "planner calibration"); carry build-dev-lead/s35a.tar.xz. Afterwards, on the CPU machine:
#   penstock plan $(for f in OUT/*.json; do echo --calibrate CONFIG_OF_f=$f; done) \
#                 --check ...16K files of docs/perf/2026-12-05-s35/calibration...
# and compare the fitted rates (and the experts' half-rate rows) with the built-in h200x8 ones.
set -uo pipefail
NAME=s35a; O=/tmp/out.s35; source tools/device_bundle_env.sh
LAYER_REPS=5
for tok in 4096 8192; do
  layer s35a dsv3bf.$tok deepseek-v3.json 3:4 $tok --fp8-weights dequant
  layer s35a dsv3fp8.$tok deepseek-v3.json 3:4 $tok --fp8-weights native --fp8-attention
  layer s35a glmbf.$tok glm-5.3.json 6:7 $tok --fp8-weights dequant --dsa-fp8-indexer
  layer s35a glmfp8.$tok glm-5.3.json 6:7 $tok --fp8-weights native --dsa-fp8-indexer
  layer s35a k3kda.$tok kimi-k3.json 1:2 $tok --fp8-weights dequant
  layer s35a k3kdafp8.$tok kimi-k3.json 1:2 $tok --fp8-weights native
  layer s35a k3mla.$tok kimi-k3.json 3:4 $tok --fp8-weights dequant
done
layer s35a dsv3bf.8k8k deepseek-v3.json 3:4 8192 --prefix 8192 --fp8-weights dequant
layer s35a glmbf.8k8k glm-5.3.json 6:7 8192 --prefix 8192 --fp8-weights dequant --dsa-fp8-indexer
cd $O && tar czf ${OUT:-/tmp}/s35.tgz *.log *.json
