#!/usr/bin/env bash
# The device side of docs/perf/2026-12-01-k3-elementwise.md, one call: (1) the GPU conformance of the bf16 SiTU /
# SiLU / sigmoid_gate / attn_res_mix paths, (2) their bandwidth at K3 shapes beside the copy ceiling of the same run
# (penstock_bench_kernels --only elementwise), (3) the two Kimi K3 layers at 16K tokens with --breakdown, the binary
# before this change (BASE, a tools/model_bench_pack.sh folder) and after (NEW) alternating, in the same run.
#   NEW=DIR BASE=DIR OUT=DIR tools/k3_elementwise_run.sh    # NEW also holds bin/cuda_kernels_test and
#                                                            # bin/penstock_bench_kernels
set -uo pipefail
NEW="${NEW:?}"; BASE="${BASE:?}"; OUT="${OUT:-./out}"; mkdir -p "${OUT}"
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
libs() { echo "$1/lib:${CUDNN_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"; }
step() { echo "+ $* ($(date -u +%H:%M:%S))"; }
{
  echo "# k3_elementwise_run $(date -u +%Y-%m-%dT%H:%M:%SZ) new $(cat "${NEW}/COMMIT") base $(cat "${BASE}/COMMIT")"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  step conformance
  LD_LIBRARY_PATH="$(libs "${NEW}")" timeout 120 "${NEW}/bin/cuda_kernels_test" \
    --gtest_filter='KdaBf16OpTest.*:KdaOpTest.ElementwiseMatchReference:KdaOpTest.AttnResMixMatchesReference:ElementwiseOpTest.SiluMul' \
    2>&1 | grep -E '^\[conf\]|^\[ *(RUN|OK|FAILED|PASSED) *\]|Failure|error|seed|exceed|got ' | tee "${OUT}/conformance.log"
  step registers  # of the new row kernels (spills would show as STACK / LOCAL)
  (cuobjdump -res-usage "${NEW}/bin/penstock_bench_kernels" 2>&1 | grep -A1 -E 'attn_res_mix_kernel|binary_rows_kernel' \
    | grep -E 'REG' | sort | uniq -c | head -20) || true
  step kernel bench
  LD_LIBRARY_PATH="$(libs "${NEW}")" timeout 120 "${NEW}/bin/penstock_bench_kernels" --only elementwise \
    --warmup 5 --reps 30 2>&1 | tee "${OUT}/kernel_bench.jsonl"
  for spec in "kimi-k3.kda-moe 1:2" "kimi-k3.mla-moe 3:4"; do
    set -- ${spec}
    for side in base new; do
      pkg="${BASE}"; [ "${side}" = new ] && pkg="${NEW}"
      mkdir -p "${OUT}/${side}"
      step "${side} $1 layers $2"
      LD_LIBRARY_PATH="$(libs "${pkg}")" timeout 150 "${pkg}/bin/penstock_model_bench" \
        --config "${pkg}/configs/kimi-k3.json" --model-name "$1" --layers "$2" --tokens 16384 --reps 3 \
        --json "${OUT}/${side}/$1.json" --breakdown 2>&1
    done
  done
  step done
} 2>&1 | tee "${OUT}/run.log"
