#!/usr/bin/env bash
# Session 61, call 2 (same warm H100 as call 1 = s60/next.sh): more interleaved rounds of pfA (HEAD) vs pfG (HEAD +
# s60 scale-smem-aligned.diff): the FP8 kernel bench, the DeepSeek-V3 FP8 layer at 16K, and the bf16 layer for the
# goal row's ratio.   run: bash docs/perf/2026-12-08-s61/c2.sh, carry build-dev-lead/pfG.tar.xz
set -uo pipefail
NAME=pfG; O=/tmp/out.c2; source tools/device_bundle_env.sh
save() { cd "$O" && tar czf "${OUT:-/tmp}/c2.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
for r in 3 4 5; do for b in pfG pfA; do fp8_grouped_bench "$b" "$r"; done; done; save
for r in 2 3 4 5; do
  for b in pfG pfA; do layer "$b" "dsv3f8.$r" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; done
  for b in pfA pfG; do layer "$b" "dsv3bf.$r" deepseek-v3.json 3:4 16384 --fp8-weights dequant; done
  save
done
date -u
