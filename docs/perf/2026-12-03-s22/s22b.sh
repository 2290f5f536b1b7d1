#!/usr/bin/env bash
# Session 22, call B (kAuto now takes kWgmmaPair for sparse calls): the sparse-MLA conformance again with the new
# dispatch, then the GLM-5.3 DSA layer (bf16 and native FP8 weights) and the Kimi K3 KDA layer at 16K beside their
# torch compositions in the same call (torch.compile; fla's chunk_kda from the carried wheels for K3 KDA).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s22b.tar.xz -C /tmp/s
P=/tmp/s/s22b; O=/tmp/s22b; mkdir -p $O
PKG=$P OUT=$O FILTER='MlaTcOpTest.Sparse*:DsaOpTest.*' BENCHES="glm k3kda" TORCH_MODELS="glm-5.3 kimi-k3-kda" REPS=5 \
  TORCH_TIMEOUT=170 TORCH_TIMEOUT_KDA=260 \
  timeout 560 bash $P/tools/session_gpu_check.sh 2>&1 | grep -v "^ *warnings.warn\|UserWarning" | tail -30
echo "session check done at ${SECONDS}s"
cp $O/*.json $O/logs.tgz $OUT/ 2>/dev/null
