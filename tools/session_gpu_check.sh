#!/usr/bin/env bash
# One device call that re-checks the kernels touched by a change and times the model layers with their breakdown:
# the conformance suites given in FILTER, the copy bench (ceiling + strided MLA K build), penstock_model_bench for
# DeepSeek-V3 (MHA form) and GLM-5.3 (FP8 indexer), each with bf16 (dequantised) and native FP8 weights, and Kimi K3
# (KDA, MLA; bf16 weights) at T with --breakdown, and the torch
# composition of the models in TORCH_MODELS in the same call.
#   PKG=DIR (tools/model_bench_pack.sh + cuda_kernels_test + penstock_bench_kernels; PKG/tools/ holds this script,
#   torch_layer_baseline.py and model_bench_table.py, which it imports) OUT=DIR \
#     [FILTER=gtest-filter] [T=16384] [REPS=3] [BENCHES="dsv3 glm k3kda k3mla"; k3kdan: K3 KDA with bf16 and native FP8 weights] [TORCH_MODELS="deepseek-v3"] \
#     [TORCH_TIMEOUT=150] [TORCH_TIMEOUT_KDA=300] \
#     tools/session_gpu_check.sh
set -uo pipefail
PKG="${PKG:?}"; OUT="${OUT:?}"; T="${T:-16384}"
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH="${PKG}/lib:${CUDNN_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
echo "commit $(cat "${PKG}/COMMIT")"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
if [ "${FILTER:-*}" != none ]; then
timeout 200 "${PKG}/bin/cuda_kernels_test" --gtest_filter="${FILTER:-*}" >"${OUT}/conf.log" 2>&1
echo "conformance rc $? ($(grep -c '| PASS' "${OUT}/conf.log") PASS lines, $(grep -c '| FAIL' "${OUT}/conf.log") FAIL)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran" "${OUT}/conf.log" | head
timeout 60 "${PKG}/bin/penstock_bench_kernels" --only copy >"${OUT}/copy.jsonl" 2>&1; echo "copy bench rc $?"
fi
bench() {  # name config layers [extra]
  local name=$1 cfg=$2 layers=$3; shift 3
  timeout 150 "${PKG}/bin/penstock_model_bench" --config "${PKG}/configs/${cfg}.json" --model-name "${name}" \
    --layers "${layers}" --tokens "${T}" --reps "${REPS:-3}" --breakdown --json "${OUT}/${name}.json" "$@" >"${OUT}/${name}.log" 2>&1
  echo "${name} rc $? $(python3 -c "import json,sys; print(', '.join(f\"{r.get('fp8_weights', 'bf16')} {r['median_ms']:.2f} ms\" for r in json.load(open(sys.argv[1])) if 'median_ms' in r))" "${OUT}/${name}.json" 2>/dev/null)"
}
for b in ${BENCHES:-dsv3 glm k3kda k3mla}; do
  case $b in
    dsv3) bench deepseek-v3.mla-moe deepseek-v3 3:4 --fp8-weights dequant,native ;;
    glm) bench glm-5.3.dsa-moe.fp8idx glm-5.3 6:7 --dsa-fp8-indexer --fp8-weights dequant,native ;;
    k3kda) bench kimi-k3.kda-moe kimi-k3 1:2 ;;
    k3kdan) bench kimi-k3.kda-moe kimi-k3 1:2 --fp8-weights dequant,native ;;
    k3mla) bench kimi-k3.mla-moe kimi-k3 3:4 ;;
  esac
done
# fla (the K3 KDA composition's chunk_kda) from wheels carried in PKG/whl when the machine has none
if [ -d "${PKG}/whl" ] && ! python3 -c "import fla" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site "${PKG}"/whl/*.whl \
    >/dev/null 2>&1 && export PYTHONPATH="/tmp/fla-site${PYTHONPATH:+:${PYTHONPATH}}"
fi
for m in ${TORCH_MODELS:-deepseek-v3}; do
  # the K3 KDA composition (fla's chunk_kda + torch.compile) compiled for more than 130 s in sessions 5 and 6
  limit="${TORCH_TIMEOUT:-150}"; [ "${m}" = kimi-k3-kda ] && limit="${TORCH_TIMEOUT_KDA:-300}"
  PYTHONUNBUFFERED=1 timeout "${limit}" python3 "${PKG}/tools/torch_layer_baseline.py" --model "${m}" --configs "${PKG}/configs" \
    --tokens "${T}" >"${OUT}/torch.${m}.log" 2>&1
  echo "torch ${m} rc $?"; grep -E "ms" "${OUT}/torch.${m}.log" | tail -3
done
# at most 8 files come back from a device call: the logs travel as one archive
(cd "${OUT}" && ls ./*.log >/dev/null 2>&1 && tar czf logs.tgz ./*.log && rm -f ./*.log)
