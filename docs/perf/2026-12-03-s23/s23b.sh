#!/usr/bin/env bash
# Session 23, call B: the Kimi K3 KDA + MoE layer (layer 1) at 16K, bf16 and native FP8 weights, beside its torch
# composition with fla's chunk_kda (wheels carried in the package, installed into a scratch site) in the same call.
set -uo pipefail
N=${NAME:-s23c}  # call C's package (40e37ed: the KDA path as f30bc40)
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/s23b; mkdir -p $O
PKG=$P OUT=$O FILTER=none BENCHES="k3kdan" TORCH_MODELS="kimi-k3-kda" T=16384 REPS=5 \
  TORCH_TIMEOUT_KDA=330 timeout 520 bash $P/tools/session_gpu_check.sh 2>&1 | grep -v "^ *warnings.warn\|UserWarning" | tail -30
echo "session check done at ${SECONDS}s"
cp $O/*.json $O/logs.tgz $OUT/ 2>/dev/null; ls $O
