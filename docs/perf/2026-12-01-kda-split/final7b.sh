#!/usr/bin/env bash
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/sess.tar.xz -C /tmp/s
PKG=/tmp/s/sess
mkdir -p /tmp/sc
PKG=$PKG OUT=/tmp/sc FILTER=none BENCHES="k3kda k3mla dsv3" TORCH_MODELS="kimi-k3-mla" REPS=10 TORCH_TIMEOUT=130 \
  timeout 250 bash ${PKG}/tools/session_gpu_check.sh 2>&1 | tee /tmp/sc/sc.txt | tail -12
cp /tmp/sc/*.json /tmp/sc/sc.txt $OUT/ 2>/dev/null; cp /tmp/sc/logs.tgz $OUT/ 2>/dev/null
