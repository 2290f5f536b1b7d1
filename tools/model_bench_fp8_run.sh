#!/usr/bin/env bash
# The FP8 layer row of PERF.md: DeepSeek-V3 layer 3:4 (MLA + MoE) with bf16 weights (--fp8-weights dequant: the
# checkpoint dequantised on load, dummy bf16 weights here) beside native block-FP8 weights (e4m3 + 128 x 128 scales,
# fp8_act_quant + fp8_gemm / fp8_grouped_gemm), both MLA forms, each form's two modes in one process, --breakdown.
#   PKG=DIR OUT=DIR tools/model_bench_fp8_run.sh      # PKG from tools/model_bench_pack.sh
# Knobs: TOKENS (default 4096,16384); REPS (3); LAYERS (3:4); TIMEOUT (s per form, 90).
set -uo pipefail
OUT="${OUT:-./out}"; mkdir -p "${OUT}"; OUT="$(cd "${OUT}" && pwd)"
PKG="${PKG:?PKG=folder from tools/model_bench_pack.sh}"
TOKENS="${TOKENS:-4096,16384}"
LOG="${OUT}/model_bench_fp8.log"
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
BINLIB="${PKG}/lib:${CUDNN_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
BIN="${PKG}/bin/penstock_model_bench"
{
  echo "# model_bench_fp8_run $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(cat "${PKG}/COMMIT" 2>/dev/null) cudnn ${CUDNN_LIB}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
} | tee -a "${LOG}"
for form in mha absorbed; do
  name="deepseek-v3.mla-moe.${form}"
  echo "+ ${name} layers ${LAYERS:-3:4} tokens ${TOKENS} --fp8-weights dequant,native ($(date -u +%H:%M:%S))" | tee -a "${LOG}"
  LD_LIBRARY_PATH="${BINLIB}" timeout "${TIMEOUT:-90}" "${BIN}" --config "${PKG}/configs/deepseek-v3.json" \
    --model-name "${name}" --layers "${LAYERS:-3:4}" --tokens "${TOKENS}" --reps "${REPS:-3}" --mla-form "${form}" \
    --fp8-weights dequant,native --breakdown --json "${OUT}/${name}.json" 2>&1 | tee -a "${LOG}"
done
echo "+ done ($(date -u +%H:%M:%S))" | tee -a "${LOG}"
