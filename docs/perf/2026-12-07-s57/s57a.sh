#!/usr/bin/env bash
# Session 57, call A (any GPU): DeepGEMM's SM90 m-grouped contiguous FP8 GEMM (the published grouped anchor of
# PERF.md) beside Penstock's expert GEMM kernels in the same call, on the DeepSeek-V3 expert shapes and the same
# expert row counts (256 experts, top-8, T 16384 and 4096). DeepGEMM (github.com/deepseek-ai/DeepGEMM at 54e2261,
# CUTLASS f3fde58 and fmt 553ec11 headers, as its submodules pin them) is carried as source (build-dg/dg.tar.xz,
# not part of the repository) and built here: its torch extension, then its kernels by its own JIT at first call.
# Order: Penstock's kernel bench (it writes the offsets), DeepGEMM's build, DeepGEMM at T 16384, Penstock again at
# T 16384, then DeepGEMM at 16384 and 4096 if the call has time left.
#   run: bash docs/perf/2026-12-07-s57/s57a.sh, carry build-dev-lead/s57a.tar.xz build-dg
set -uo pipefail
NAME=s57a; O=/tmp/out.s57a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s57a.tgz" *.log *.jsonl *.err off 2>/dev/null; cd - > /dev/null; }
R=$(pwd); mkdir -p "$O/off"
export CUDA_HOME=/usr/local/cuda
pen() {  # pen TAG [T]: Penstock's FP8 expert GEMMs (every TMA variant, the fused GLU), DeepSeek-V3 shapes
  PENSTOCK_FP8_OFFSETS_DIR=$O/off PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=${2:-} timeout 150 \
    "$P/bin/penstock_bench_kernels" --only fp8 > "$O/$1.jsonl" 2> "$O/$1.err"
  echo "pen $1 rc $? at ${SECONDS}s"
  python3 - "$O/$1.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r = json.loads(l)
    if r.get('bench', '').startswith('fp8_grouped'):
        print(f"  {r['shape']:26s} T {r['tokens']:5d} {r.get('variant', ''):22s} {r.get('time_us', 0):9.1f} us "
              f"{r.get('tflops', 0):7.1f} TFLOP/s")
PY
}
dg() {  # dg TAG T...: DeepGEMM on the same offsets
  DG_PRINT_CONFIGS=1 PYTHONPATH=/tmp/dg/DeepGEMM DG_JIT_CACHE_DIR=/tmp/dgcache timeout "${DG_TIMEOUT:-300}" python3 \
    docs/perf/2026-12-07-s57/deepgemm_grouped.py "$O/off" "${@:2}" > "$O/$1.jsonl" 2> "$O/$1.err"
  echo "dg $1 rc $? at ${SECONDS}s"; tail -2 "$O/$1.err"
  python3 - "$O/$1.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    try:
        r = json.loads(l)
    except ValueError:
        print('  dg:', l.rstrip()[:200]); continue
    if 'error' in r:
        print('  dg error:', r)
    elif 'shape' in r:
        kind = 'bf16' if r['bench'].endswith('bf16') else 'fp8 '
        print(f"  {r['shape']:26s} T {r['tokens']:5d} deepgemm {kind} kineto {r['kernel_us_kineto']:9.1f} us "
              f"{r['tflops_kineto']:7.1f} | events {r['events_median_us']:9.1f} us {r['tflops_events']:7.1f} "
              f"TFLOP/s | rows {r['rows']} padded {r['padded_rows']} | err {r['max_rel_err_32rows']:.2e}")
    else:
        print(' ', l.strip())
PY
}
pen pen1; save
mkdir -p /tmp/dg && tar -xJf build-dg/dg.tar.xz -C /tmp/dg
cd /tmp/dg/DeepGEMM && cp -r third-party/cutlass/include/cute third-party/cutlass/include/cutlass deep_gemm/include/ \
  && echo 'persistent_envs = dict()' > deep_gemm/envs.py
MAX_JOBS=16 timeout 300 python3 setup.py build_ext --inplace > "$O/dg_build.log" 2>&1; echo "dg build rc $? at ${SECONDS}s"
tail -3 "$O/dg_build.log"; cd "$R"; save
DG_TIMEOUT=240 dg dg1 16384; save
pen pen2 16384; save
if [ "${SECONDS}" -lt 380 ]; then DG_TIMEOUT=150 dg dg2 16384 4096; save; fi
date -u
