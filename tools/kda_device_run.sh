#!/usr/bin/env bash
# KDA on the GPU machine in one call: the delta-rule conformance cases (fp32 chunk, tensor-core chunk, recurrent),
# penstock_bench_kernels --only kda, optionally Nsight Compute on one tensor-core launch (NCU=1) and fla's chunk_kda
# side by side (FLA=1; wheels in WHL, Triton compiles ~75 s on first use).
#   PKG=DIR OUT=DIR [NCU=1] [FLA=1 WHL=DIR] tools/kda_device_run.sh
set -uo pipefail
PKG="${PKG:?PKG=folder with bin/ lib/}"
OUT="${OUT:-./out}"; mkdir -p "${OUT}"
export LD_LIBRARY_PATH="${PKG}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "${OUT}/gpu.txt"
cat "${PKG}/COMMIT" 2>/dev/null | tee -a "${OUT}/gpu.txt"
timeout 200 "${PKG}/bin/cuda_kernels_test" --gtest_filter='KdaOpTest.DeltaRule*' >"${OUT}/conf.log" 2>&1
echo "conformance rc $? ($(grep -c '| PASS' "${OUT}/conf.log") PASS, $(grep -c '| FAIL' "${OUT}/conf.log") FAIL)"
grep -E "FAILED|\| FAIL" "${OUT}/conf.log" | head
timeout 200 "${PKG}/bin/penstock_bench_kernels" --only kda --reps 5 >"${OUT}/penstock_kda.jsonl" 2>"${OUT}/bench.err"
echo "bench rc $?"
python3 - "${OUT}/penstock_kda.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        print(f"{r['variant']:>18} T {r['tokens']:>6}: {r['ms']:9.3f} ms  {r['tflops_chunk_model']:6.1f} TFLOP/s  "
              f"diff {r.get('max_abs_diff_vs_recurrent_16rows', '-')}")
PY
if [ "${PROFILE:-0}" = 1 ]; then  # CTA 0's cycles per phase of the tensor-core kernel (kda_chunk_tc.cu)
  PENSTOCK_KDA_TC_PROFILE=1 timeout 100 "${PKG}/bin/penstock_bench_kernels" --only kda --reps 1 --warmup 0 \
    2>&1 >/dev/null | grep "kda_tc profile" | head -3
fi
if [ "${NCU:-0}" = 1 ]; then  # the 1000-token, 2-head tensor-core case (the 8th tensor-core launch)
  timeout 150 ncu --clock-control none --set full --import-source yes -k regex:delta_rule_chunk_tc --launch-skip 7 \
    --launch-count 1 -o "${OUT}/kda_tc" "${PKG}/bin/cuda_kernels_test" \
    --gtest_filter=KdaOpTest.DeltaRuleChunkTensorCoreMatchesReference >"${OUT}/ncu.log" 2>&1
  ncu -i "${OUT}/kda_tc.ncu-rep" --page details >"${OUT}/ncu_details.txt" 2>&1
  ncu -i "${OUT}/kda_tc.ncu-rep" --page source --csv --print-source cuda >"${OUT}/ncu_source.csv" 2>&1
  tar czf "${OUT}/ncu.tgz" -C "${OUT}" ncu_details.txt ncu_source.csv ncu.log && rm -f "${OUT}/ncu_details.txt" \
    "${OUT}/ncu_source.csv" "${OUT}/ncu.log"
fi
if [ "${FLA:-0}" = 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${WHL}"/*.whl &&
    PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 400 python3 "${PKG}/fla_kda_baseline.py" >"${OUT}/fla_kda.jsonl" \
      2>"${OUT}/fla_kda.err"
  echo "fla rc $?"
  python3 - "${OUT}/fla_kda.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        print(f"fla {r['case']:>15} T {r['tokens']:>6}: {r.get('ms', float('nan')):9.3f} ms")
PY
fi
