#!/usr/bin/env bash
# Interleaved A/B of whole layers on one GPU machine (issue #7): the same binary under different environment
# settings (e.g. PENSTOCK_GROUPED_GEMM=cublaslt vs device), ROUNDS rounds of every mode x layer, with the SM clock and
# power sampled in the background. A layer at 16K runs at the H200's power limit, so a kernel that is faster alone
# can slow the rest of the layer down: only interleaved reps of the whole layer show the net effect
# (docs/perf/2026-12-01-grouped-gemm-dyn.md).
#   PKG=DIR (tools/session_gpu_pack.sh) OUT=DIR MODES="default PENSTOCK_GROUPED_GEMM=cublaslt ..." \
#     [LAYERS="dsv3 dsv3n dsv3n2 dsv3na dsv3a glm glmn k3kda k3mla k3mlan k3mlana"] (dsv3n2: two layers, 3:5; a suffix
#     n: native FP8 weights, a: --fp8-attention) [T=16384] [REPS=8] [ROUNDS=2] tools/layer_ab.sh
# A mode is "default" (nothing set) or VAR=value[,VAR=value...]; BIN=name (one of the VARs) runs ${PKG}/bin/name instead
# of penstock_model_bench, for A/Bs of two builds. Per run: OUT/<layer>.<mode#>.<round>.json (the model
# bench's JSON with --breakdown); OUT/ab.log (one line per run: median, min, joules per rep and mean power when NVML's
# energy counter is there, the experts scope); OUT/clocks.log.
set -uo pipefail
PKG="${PKG:?}"; OUT="${OUT:?}"; T="${T:-16384}"
mkdir -p "${OUT}"
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH="${PKG}/lib:${CUDNN_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 250 \
  >"${OUT}/clocks.log" 2>&1 &
smi=$!
trap 'kill ${smi} 2>/dev/null' EXIT
{
  echo "commit $(cat "${PKG}/COMMIT")"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  for round in $(seq 1 "${ROUNDS:-2}"); do
    m=0
    for mode in ${MODES:-default}; do
      m=$((m + 1))
      for b in ${LAYERS:-dsv3 k3mla}; do
        case ${b} in
          dsv3) set -- deepseek-v3.mla-moe deepseek-v3 3:4 --fp8-weights dequant ;;
          dsv3n) set -- deepseek-v3.mla-moe deepseek-v3 3:4 --fp8-weights native ;;
          dsv3n2) set -- deepseek-v3.mla-moe.2layers deepseek-v3 3:5 --fp8-weights native ;;
          dsv3na) set -- deepseek-v3.mla-moe deepseek-v3 3:4 --fp8-weights native --fp8-attention ;;
          dsv3a) set -- deepseek-v3.mla-moe deepseek-v3 3:4 --fp8-weights dequant --fp8-attention ;;
          glm) set -- glm-5.3.dsa-moe.fp8idx glm-5.3 6:7 --dsa-fp8-indexer --fp8-weights dequant ;;
          glmn) set -- glm-5.3.dsa-moe.fp8idx glm-5.3 6:7 --dsa-fp8-indexer --fp8-weights native ;;
          k3kda) set -- kimi-k3.kda-moe kimi-k3 1:2 ;;
          k3mla) set -- kimi-k3.mla-moe kimi-k3 3:4 ;;
          k3mlan) set -- kimi-k3.mla-moe kimi-k3 3:4 --fp8-weights native ;;
          k3mlana) set -- kimi-k3.mla-moe kimi-k3 3:4 --fp8-weights native --fp8-attention ;;
          *) echo "unknown layer ${b}"; continue ;;
        esac
        name=$1; cfg=$2; layers=$3; shift 3
        envs=()
        [ "${mode}" != default ] && IFS=, read -r -a envs <<<"${mode}"
        bin="${PKG}/bin/penstock_model_bench"
        for i in "${!envs[@]}"; do
          if [[ "${envs[$i]}" == BIN=* ]]; then bin="${PKG}/bin/${envs[$i]#BIN=}"; unset 'envs[i]'; fi
        done
        json="${OUT}/${b}.${m}.${round}.json"
        t0=$(date -u +%T)
        env "${envs[@]}" timeout "${RUN_TIMEOUT:-120}" "${bin}" --config "${PKG}/configs/${cfg}.json" \
          --model-name "${name}" --layers "${layers}" --tokens "${T}" --reps "${REPS:-8}" --breakdown --json "${json}" "$@" \
          >"${OUT}/${b}.${m}.${round}.log" 2>&1
        rc=$?
        echo "${b} [${mode}] round ${round} [${t0}-$(date -u +%T)] rc ${rc} $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
attn = sum(v for k, v in b.items() if k.endswith('.attention'))
quant = sum(v for k, v in b.items() if k.endswith('.fp8_quant'))
e = f\", {r['energy_j_per_rep']:.2f} J at {r['mean_power_w']:.0f} W\" if 'energy_j_per_rep' in r else ''
print(f\"{r['median_ms']:.2f} ms (min {r['min_ms']:.2f}){e}, experts {b.get('layer.moe.experts', 0):.2f} ms, attention {attn:.2f} ms, fp8_quant {quant:.2f} ms\")" "${json}" 2>/dev/null)"
      done
    done
  done
} 2>&1 | tee "${OUT}/ab.log"
