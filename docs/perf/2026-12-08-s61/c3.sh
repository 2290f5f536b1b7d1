#!/usr/bin/env bash
# Session 61, call 3 (any GPU): the GLM-5.3 DSA goal row with the landed code (bundle pfG = HEAD's kernels: the FP8
# GEMMs' scales through shared memory), as session 55's call 8 ran it: layer 6 at T 65536, native FP8 weights, FP8
# indexer, fp8-accumulate, twice around torch_layer_baseline.py at 65536; then Nsight Compute's per-instruction stall
# samples on the fp8 indexer logits kernel (the first launch in the GLM-5.3 layer at 16K), for the next session.
#   run: bash docs/perf/2026-12-08-s61/c3.sh, carry build-dev-lead/pfG.tar.xz
set -uo pipefail
NAME=pfG; O=/tmp/out.c3; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/c3.tgz" *.log *.json *.txt *.csv 2>/dev/null; cd - > /dev/null; }
g() { LAYER_REPS=5 LAYER_TIMEOUT=90 layer pfG "glm$1.$2" glm-5.3.json 6:7 "$1" --fp8-weights native --dsa-fp8-indexer \
  --dsa-fp8-accumulate; save; }
g 65536 1
torch_layer glm-5.3 65536 200; save
g 65536 2
NCU_TIMEOUT=150 ncu_sass idx16k dsa_indexer_logits_wgmma_fp8 "$P/bin/penstock_model_bench" --config "$P/configs/glm-5.3.json" \
  --layers 6:7 --tokens 16384 --reps 1 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate; save
date -u
