#!/usr/bin/env bash
# The engine's own forward per layer at real dimensions (bench/layer/model_bench.cc, dummy weights on the GPU) for
# every family, beside the torch compositions of the same layers (tools/torch_layer_baseline.py: DeepSeek-V3, GLM-5.3
# DSA, Kimi K3 KDA and MLA, eager and torch.compile'd) in the same run, on one GPU machine.
#   PKG=DIR OUT=DIR tools/model_bench_run.sh      # PKG from tools/model_bench_pack.sh
# Knobs: TOKENS (default 4096,16384); REPS (3); BREAKDOWN=1 adds --breakdown (per-scope times, kernels/profile.h);
# PREFIX_RUN (1: the DSA prefix rows); TORCH (1); TORCH_MODELS (default "deepseek-v3 glm-5.3 kimi-k3-mla
# kimi-k3-kda"); TORCH_TOKENS (default TOKENS); TORCH_TIMEOUT (s per model, 240); WHEELS=DIR of fla wheels
# (fla-core, flash-linear-attention) installed into a scratch site-packages first when fla is missing;
# FP8_WEIGHTS (default dequant: bf16 weights for the block-FP8 configs DeepSeek-V3 and GLM-5.3; "dequant,native" adds
# their native FP8 rows, named <layer>.fp8 by tools/model_bench_table.py; tools/model_bench_fp8_run.sh does only those).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-./out}"; mkdir -p "${OUT}"; OUT="$(cd "${OUT}" && pwd)"
PKG="${PKG:?PKG=folder from tools/model_bench_pack.sh}"
TOKENS="${TOKENS:-4096,16384}"
LOG="${OUT}/model_bench.log"
export PYTHONUNBUFFERED=1
# cuDNN (the MHA-form attention path): the directory of torch's libcudnn.so.9 (its engine libraries sit beside it).
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
BINLIB="${PKG}/lib:${CUDNN_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
BIN="${PKG}/bin/penstock_model_bench"
step() { echo "+ $* ($(date -u +%H:%M:%S))" | tee -a "${LOG}"; }
{
  echo "# model_bench_run $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(cat "${PKG}/COMMIT" 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
} | tee -a "${LOG}"
EXTRA=()
if [ "${BREAKDOWN:-0}" = 1 ]; then EXTRA+=(--breakdown); fi
bench() {  # name config layers [extra args]
  local name=$1 cfg=$2 layers=$3; shift 3
  step "${name} layers ${layers} tokens ${TOKENS} $* ${EXTRA[*]}"
  LD_LIBRARY_PATH="${BINLIB}" timeout 240 "${BIN}" --config "${PKG}/configs/${cfg}.json" --model-name "${name}" \
    --layers "${layers}" --tokens "${TOKENS}" --reps "${REPS:-3}" --json "${OUT}/${name}.json" "${EXTRA[@]}" "$@" \
    2>&1 | tee -a "${LOG}"
}
bench deepseek-v3.mla-moe deepseek-v3 3:4 --fp8-weights "${FP8_WEIGHTS:-dequant}"
bench deepseek-v3.mla-moe.absorbed deepseek-v3 3:4 --mla-form absorbed --fp8-weights "${FP8_WEIGHTS:-dequant}"
bench glm-5.3.dsa-moe glm-5.3 6:7 --fp8-weights "${FP8_WEIGHTS:-dequant}"
bench kimi-k3.kda-moe kimi-k3 1:2
bench kimi-k3.mla-moe kimi-k3 3:4
if [ "${PREFIX_RUN:-1}" = 1 ]; then  # DSA at long prefixes: a 4K chunk after 16K / 60K of context
  TOKENS=4096 bench glm-5.3.dsa-moe.prefix glm-5.3 6:7 --prefix 16384,61440 --fp8-weights "${FP8_WEIGHTS:-dequant}"
  # ... and with the FP8 indexer (e4m3 index K + per-row scales, tensor-core logits; DeepSeek-V3.2's reference indexer)
  TOKENS=4096 bench glm-5.3.dsa-moe.prefix.fp8idx glm-5.3 6:7 --prefix 16384,61440 --dsa-fp8-indexer \
    --fp8-weights "${FP8_WEIGHTS:-dequant}"
fi
bench glm-5.3.dsa-moe.fp8idx glm-5.3 6:7 --dsa-fp8-indexer --fp8-weights "${FP8_WEIGHTS:-dequant}"
if [ "${TORCH:-1}" = 1 ]; then
  if [ -n "${WHEELS:-}" ] && ! python3 -c "import fla" 2>/dev/null; then
    step "fla wheels from ${WHEELS}"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site \
      "${WHEELS}"/*.whl 2>&1 | tee -a "${LOG}"
    export PYTHONPATH="/tmp/fla-site${PYTHONPATH:+:${PYTHONPATH}}"
  fi
  for m in ${TORCH_MODELS:-deepseek-v3 glm-5.3 kimi-k3-mla kimi-k3-kda}; do
    step "torch_layer_baseline ${m} T=${TORCH_TOKENS:-${TOKENS}}"
    timeout "${TORCH_TIMEOUT:-240}" python3 "${ROOT}/tools/torch_layer_baseline.py" --model "${m}" \
      --configs "${PKG}/configs" --tokens "${TORCH_TOKENS:-${TOKENS}}" 2>&1 | tee -a "${LOG}"
  done
fi
step done
