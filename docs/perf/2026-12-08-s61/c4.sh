#!/usr/bin/env bash
# Session 61, call 4 (for the H200 if one comes; the bf16 goal row was last measured there in session 51):
# DeepSeek-V3 layer 3 at 16K with the landed code (bundle pfG), bf16 (dequant) and native FP8 + FP8 attention, around
# torch_layer_baseline.py's torch.compile composition in the same call (session 57's s57b.sh with pfG).
#   run: bash docs/perf/2026-12-08-s61/c4.sh, carry build-dev-lead/pfG.tar.xz
set -uo pipefail
NAME=pfG; O=/tmp/out.c4; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/c4.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
dsv3_goal_rows pfG  # tools/device_bundle_env.sh: rounds 1-2, torch.compile, rounds 3-4
date -u
