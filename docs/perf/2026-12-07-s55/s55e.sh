#!/usr/bin/env bash
# Session 55, call E (any GPU; the last of the session's device time): the GLM-5.3 DSA goal row with the landed code
# (bundle s53b's default path = HEAD's kernels), as session 41's call E ran it on an H100: layer 6 at T 65536, native
# FP8 weights, FP8 indexer, fp8-accumulate, twice, around torch_layer_baseline.py at 65536 (eager, torch.compile) in
# the same call; then the 16K row likewise. Saves s55e.tgz after each phase.
#   run: bash docs/perf/2026-12-07-s55/s55e.sh, carry build-dev-lead/s53b.tar.xz
set -uo pipefail
NAME=s53b; O=/tmp/out.s55e; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s55e.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
g() { LAYER_REPS=5 LAYER_TIMEOUT=90 layer s53b "glm$1.$2" glm-5.3.json 6:7 "$1" --fp8-weights native --dsa-fp8-indexer \
  --dsa-fp8-accumulate; save; }
g 65536 1
torch_layer glm-5.3 65536 200; save
g 65536 2
g 16384 1
torch_layer glm-5.3 16384 120; save
g 16384 2
