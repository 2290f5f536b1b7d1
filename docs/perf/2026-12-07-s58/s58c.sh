#!/usr/bin/env bash
# Session 58, call C (any GPU; the session's last device seconds): Nsight Compute on the first gate_up launch of
# kWgmmaTmaN192 (Penstock's kernel bench, DeepSeek-V3 experts at T 16384) and on DeepGEMM's first FP8 grouped launch
# (the same gate_up shape and offsets, deepgemm_grouped.py), for the stall reasons behind DeepGEMM's 1.2x.
#   run: bash docs/perf/2026-12-07-s58/s58c.sh, carry build-dev-lead/s58a.tar.xz build-dg
set -uo pipefail
NAME=s58a; O=/tmp/out.s58c; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s58c.tgz" *.txt *.log off 2>/dev/null; cd - > /dev/null; }
mkdir -p "$O/off"
PENSTOCK_FP8_OFFSETS_DIR=$O/off PENSTOCK_FP8_BENCH_SHAPE=gate_up PENSTOCK_FP8_BENCH_T=16384 NCU_TIMEOUT=90 \
  ncu_sass pen_n192 n192 "$P/bin/penstock_bench_kernels" --only fp8; save
R=$(pwd); export CUDA_HOME=/usr/local/cuda
mkdir -p /tmp/dg211 && tar -xJf build-dg/dg211.tar.xz -C /tmp/dg211
cd /tmp/dg211/DeepGEMM && rm -rf build ./*.so deep_gemm/*.so && cp -r third-party/cutlass/include/cute \
  third-party/cutlass/include/cutlass deep_gemm/include/ && echo 'persistent_envs = dict()' > deep_gemm/envs.py
CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/g++ -shared" MAX_JOBS=16 timeout 120 python3 setup.py \
  build_ext --inplace > "$O/build.dg.log" 2>&1; echo "dg build rc $? at ${SECONDS}s"; cd "$R"
DG_SKIP_BF16=1 PYTHONPATH=/tmp/dg211/DeepGEMM DG_JIT_CACHE_DIR=/tmp/dgc NCU_TIMEOUT=120 \
  ncu_sass dg_fp8 sm90_fp8 python3 docs/perf/2026-12-07-s57/deepgemm_grouped.py "$O/off" 16384; save
date -u
