#!/usr/bin/env bash
# Session 40, call E: penstock forward --backend cuda over every fixture and variant checkpoint against its
# transformers reference (tools/gpu_forward_check.py: f32 and bf16, MHA and absorbed MLA forms, chunked and whole
# prompts), with the caching allocator's pressure policy and the MoE scratch change (bundle s40f: penstock at dccd6f3,
# tools/pack_device_bundle.sh build-cuda ../shared/fixtures build-dev-lead/s40f).
set -uo pipefail
mkdir -p /tmp/s && [ -d /tmp/s/s40f ] || tar -xJf build-dev-lead/s40f.tar.xz -C /tmp/s
source /tmp/s/s40f/setup.sh > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
O=${OUT:-/tmp/out.s40e}; mkdir -p "$O"
F=/tmp/s/s40f/fixtures
JOBS=16 PYTHONUNBUFFERED=1 timeout 400 python3 tools/gpu_forward_check.py "$BIN/penstock" "$O" $F/deepseek_v3_tiny \
  $F/deepseek_v3_tiny_fp8 $F/glm_moe_dsa_tiny $F/kimi_linear_tiny tests/data/variants*/* > "$O/forward_check.log" 2>&1
echo "forward check rc $? at ${SECONDS}s"
cat "$O/forward_check_summary.md" 2>/dev/null | head -60
