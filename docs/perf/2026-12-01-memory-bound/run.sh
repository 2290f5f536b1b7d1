#!/usr/bin/env bash
# Device side of docs/perf/2026-12-01-memory-bound.md: conformance of the changed kernels, then the kernel benches with
# PENSTOCK_MEMBW_BASELINE=1 (the kernels before the change) and =0 (after), alternating, in one process tree.
set -uo pipefail
OUT="${OUT:-./out}"; mkdir -p "${OUT}/logs"; L="${OUT}/logs"
W=/tmp/memkit; rm -rf "$W"; mkdir -p "$W"; tar -C "$W" -xJf build-dev-mem/pkg.tar.xz
P="$W/pkg"
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH="$P/lib:${CUDNN_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
step() { echo "+ $* ($(date -u +%H:%M:%S))"; }
{
  echo "# memory-bound run $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(cat "$P/COMMIT" 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  step conformance
  PENSTOCK_MEMBW_BASELINE=0 timeout 150 "$P/bin/cuda_kernels_test" \
    --gtest_filter='KdaOpTest.ShortConv*:KdaOpTest.ElementwiseMatchReference:KdaOpTest.AttnResMixMatchesReference:KdaBf16OpTest.*:DataMovementOpTest.*:ElementwiseOpTest.*' \
    > "$L/conformance_full.log" 2>&1; echo "conformance rc $?"
  grep -E '^\[conf\]|^\[ *(RUN|OK|FAILED|PASSED) *\]|Failure|seed|exceed' "$L/conformance_full.log" > "$L/conformance.log"
  echo "conf PASS $(grep -c '^\[conf\].*PASS' "$L/conformance.log") FAIL $(grep -c '^\[conf\].*FAIL' "$L/conformance.log")"
  grep -E '^\[ *(PASSED|FAILED) *\]' "$L/conformance.log"
  step registers
  (cuobjdump -res-usage "$P/bin/penstock_bench_kernels" 2>&1 | grep -A1 -E 'attn_res_mix_bf16_kernel|short_conv_vec_kernel|copy_rows_kernel' \
    | grep -E 'REG' | sort | uniq -c | head -20) || true
  for rep in 1; do
    for side in 1 0; do
      tag=$([ $side = 1 ] && echo base || echo new)
      step "bench $tag rep $rep"
      PENSTOCK_MEMBW_BASELINE=$side timeout 60 "$P/bin/penstock_bench_kernels" --only copy --warmup 5 --reps 30 \
        > "$L/bench_copy_${tag}_${rep}.jsonl" 2>&1; echo "rc $?"
      PENSTOCK_MEMBW_BASELINE=$side timeout 60 "$P/bin/penstock_bench_kernels" --only elementwise --warmup 5 --reps 30 \
        > "$L/bench_elementwise_${tag}_${rep}.jsonl" 2>&1; echo "rc $?"
      PENSTOCK_MEMBW_BASELINE=$side PENSTOCK_CUDA_PERF=1 timeout 60 "$P/bin/cuda_kernels_test" --gtest_filter='KdaOpTest.Perf' \
        2>&1 | grep -E '^\[perf\]' | grep -v delta_rule > "$L/kda_perf_${tag}_${rep}.log"; echo "rc $?"
    done
  done
  step done
} 2>&1 | tee "$L/run.log"
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$L"
