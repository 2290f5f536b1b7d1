#!/usr/bin/env bash
# Session 11, call F: bf16 (--fp8-weights dequant) vs native FP8 layers of DeepSeek-V3 and GLM-5.3 in one interleaved
# run on the committed build (the FP8 layer row's ratio needs its bf16 baseline from the same run).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s11.tar.xz -C /tmp/s; P=/tmp/s/s11
O=/tmp/s11f; mkdir -p $O
echo "commit $(cat $P/COMMIT) $(date -u +%T)"
PKG=$P OUT=$O/ab MODES="default" LAYERS="dsv3 dsv3n glm glmn" REPS=8 ROUNDS=3 RUN_TIMEOUT=60 timeout 300 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s11f.tar.xz s11f
