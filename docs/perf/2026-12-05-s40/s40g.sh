#!/usr/bin/env bash
# Session 40, call G: call E's forward check on the two FP8 checkpoints with --fp8-weights dequant, fp32 (call E ran
# them natively, the CUDA default, where the activations' e4m3 rounding alone exceeds the fp32 bound of 2e-3).
set -uo pipefail
mkdir -p /tmp/s && [ -d /tmp/s/s40f ] || tar -xJf build-dev-lead/s40f.tar.xz -C /tmp/s
source /tmp/s/s40f/setup.sh > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
O=${OUT:-/tmp/out.s40g}; mkdir -p "$O"
F=/tmp/s/s40f/fixtures
DTYPES=float32 FORWARD_ARGS="--fp8-weights dequant" JOBS=16 PYTHONUNBUFFERED=1 timeout 200 python3 \
  tools/gpu_forward_check.py "$BIN/penstock" "$O" $F/deepseek_v3_tiny_fp8 tests/data/variants/dsv3_fp8_h3 \
  > "$O/forward_check.log" 2>&1
echo "forward check rc $? at ${SECONDS}s"
cat "$O/forward_check_summary.md" 2>/dev/null | head -20
