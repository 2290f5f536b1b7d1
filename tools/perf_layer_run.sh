#!/usr/bin/env bash
# The layer benchmark beside its same-run torch baselines, on one GPU machine (docs/perf/README.md, PERF.md):
#   1. penstock_layer_bench (bench/layer/layer_bench.cc): every op and the whole DeepSeek-V3 MLA+MoE layer, bf16;
#      GLM-5.3's MLA/MoE dims at 4K (dense MLA, no DSA indexer);
#   2. tools/op_baselines.py: the torch op for each of those ops at the same shapes;
#   3. tools/torch_layer_baseline.py (PERF.md's layer baseline): eager and torch.compile'd DeepSeek-V3 layer at 16K
#      plus the GLM-5.3 DSA indexer in torch, and the eager layer at 4K.
# Everything goes to $OUT (JSON + logs); tools/perf_layer_table.py turns it into the docs/perf table.
#   PKG=build-h6/layerpkg CONFIGS=build-h6/layerpkg/configs OUT=/tmp/o tools/perf_layer_run.sh
# PKG holds bin/, lib/ and configs/ (tools/perf_layer_pack.sh packs it); TOKENS overrides 4096,16384; GLM=0 skips
# the GLM-5.3 run; SKIP_OPS=1 times only the layer and its two parts on the Penstock side (e.g. TOKENS=32768).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-./out}"
PKG="${PKG:-${ROOT}/build-h6/layerpkg}"
CONFIGS="${CONFIGS:-${PKG}/configs}"
TOKENS="${TOKENS:-4096,16384}"
mkdir -p "${OUT}"
OUT="$(cd "${OUT}" && pwd)"
LOG="${OUT}/perf_layer.log"
export PYTHONUNBUFFERED=1
# The binary alone gets the packed libstdc++, CUDA 13's libraries and, for a build with the cuDNN SDPA path
# (PENSTOCK_CUDNN), the machine's torch cuDNN (python keeps its own environment).
CUDNN_LIB="$(python3 - 2>/dev/null <<'PY'
import glob, os, site
pattern = os.path.join("nvidia", "**", "libcudnn.so.9")
hits = [f for r in site.getsitepackages() for f in glob.glob(os.path.join(r, pattern), recursive=True)]
print(os.path.dirname(hits[0]) if hits else "")
PY
)"
BINLIB="${PKG}/lib:/usr/local/cuda/lib64:/usr/local/cuda-13.0/targets/x86_64-linux/lib:${CUDNN_LIB}"
BINLIB="${BINLIB}:${LD_LIBRARY_PATH:-}"
step() { echo "+ $* ($(date -u +%H:%M:%S))" | tee -a "${LOG}"; }
{
  echo "# perf_layer_run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# commit $(git -C "${ROOT}" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1
  python3 -c "import torch; print('# torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())" 2>&1
} | tee -a "${LOG}"

BIN="${PKG}/bin/penstock_layer_bench"
step penstock_layer_bench deepseek-v3 "${TOKENS}"
LD_LIBRARY_PATH="${BINLIB}" "${BIN}" --config "${CONFIGS}/deepseek-v3.json" --model-name deepseek-v3 --tokens "${TOKENS}" \
  ${SKIP_OPS:+--skip-ops} --json "${OUT}/penstock_deepseek-v3.json" 2>&1 | tee -a "${LOG}"
step op_baselines deepseek-v3 "${TOKENS}"
python3 "${ROOT}/tools/op_baselines.py" --config "${CONFIGS}/deepseek-v3.json" --model-name deepseek-v3 \
  --tokens "${TOKENS}" --json "${OUT}/torch_ops_deepseek-v3.json" 2>&1 | tee -a "${LOG}"
for t in ${TOKENS//,/ }; do
  skip=1; [ "${t}" = 16384 ] && skip=0  # the GLM-5.3 indexer baseline (16K and 64K) runs once, with the 16K layer
  step torch_layer_baseline T=${t} "(eager, torch.compile; indexer skipped=${skip})"
  PENSTOCK_T=${t} PENSTOCK_SKIP_INDEXER=${skip} python3 "${ROOT}/tools/torch_layer_baseline.py" 2>&1 | tee -a "${LOG}"
done
if [ "${GLM:-1}" = 1 ]; then
  step penstock_layer_bench glm-5.3 4096
  LD_LIBRARY_PATH="${BINLIB}" "${BIN}" --config "${CONFIGS}/glm-5.3.json" --model-name glm-5.3-dense-mla --tokens 4096 \
    --json "${OUT}/penstock_glm-5.3.json" 2>&1 | tee -a "${LOG}"
  step op_baselines glm-5.3 4096
  python3 "${ROOT}/tools/op_baselines.py" --config "${CONFIGS}/glm-5.3.json" --model-name glm-5.3-dense-mla \
    --tokens 4096 --json "${OUT}/torch_ops_glm-5.3.json" 2>&1 | tee -a "${LOG}"
fi
grep -h "^BASELINE_JSON " "${LOG}" | sed 's/^BASELINE_JSON //' >"${OUT}/torch_layer.jsonl"
step done
