#!/usr/bin/env bash
# The engine's own forward per layer at real dimensions (bench/layer/model_bench.cc, dummy weights on the GPU) for
# every family, beside PERF.md's torch layer baseline (tools/torch_layer_baseline.py: DeepSeek-V3 layer eager and
# torch.compile'd, and the GLM-5.3 indexer) in the same run, on one GPU machine.
#   PKG=DIR OUT=DIR tools/model_bench_run.sh      # PKG from tools/model_bench_pack.sh; TOKENS (default 4096,16384)
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
bench() {  # name config layers [extra args]
  local name=$1 cfg=$2 layers=$3; shift 3
  step "${name} layers ${layers} tokens ${TOKENS} $*"
  LD_LIBRARY_PATH="${BINLIB}" timeout 240 "${BIN}" --config "${PKG}/configs/${cfg}.json" --model-name "${name}" \
    --layers "${layers}" --tokens "${TOKENS}" --reps "${REPS:-3}" --json "${OUT}/${name}.json" "$@" 2>&1 | tee -a "${LOG}"
}
bench deepseek-v3.mla-moe deepseek-v3 3:4
bench deepseek-v3.mla-moe.absorbed deepseek-v3 3:4 --mla-form absorbed
bench glm-5.3.dsa-moe glm-5.3 6:7
bench kimi-k3.kda-moe kimi-k3 1:2
bench kimi-k3.mla-moe kimi-k3 3:4
if [ "${PREFIX_RUN:-1}" = 1 ]; then  # DSA at long prefixes: a 4K chunk after 16K / 60K of context
  TOKENS=4096 bench glm-5.3.dsa-moe.prefix glm-5.3 6:7 --prefix 16384,61440
  # ... and with the FP8 indexer (e4m3 index K + per-row scales, tensor-core logits; DeepSeek-V3.2's reference indexer)
  TOKENS=4096 bench glm-5.3.dsa-moe.prefix.fp8idx glm-5.3 6:7 --prefix 16384,61440 --dsa-fp8-indexer
  bench glm-5.3.dsa-moe.fp8idx glm-5.3 6:7 --dsa-fp8-indexer
fi
if [ "${TORCH:-1}" = 1 ]; then
  step torch_layer_baseline T=16384
  PENSTOCK_T=16384 timeout 300 python3 "${ROOT}/tools/torch_layer_baseline.py" 2>&1 | tee -a "${LOG}"
fi
step done
