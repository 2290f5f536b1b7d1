#!/usr/bin/env bash
# Session 58, call A (any GPU): the first run of kWgmmaTmaN192 (fp8_gemm_n192.cu: 128 x 192 tiles, one m64n192 chain
# per k-step, TMA-store epilogue through a dedicated output tile). Conformance (Fp8TmaTest: the reference, byte
# equality with kWgmmaTmaWide, the tail-heavy launches), then the kernel bench three times (DeepSeek-V3 experts at
# T 16384: every variant in one process), then DeepSeek-V3 layer 3 (native FP8 + FP8 attention) and GLM-5.3 layer 6
# at 16K with PENSTOCK_FP8_N192 = 0 / 1 interleaved, then DeepGEMM v2.1.1 on the same offsets (session 57's build).
# One kernel bench run has PENSTOCK_FP8_N192_STORE=0 (n192 with register stores: the TMA store's share).
#   run: bash docs/perf/2026-12-07-s58/s58a.sh, carry build-dev-lead/s58a.tar.xz build-dg
set -uo pipefail
NAME=s58a; O=/tmp/out.s58a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s58a.tgz" *.log *.json *.jsonl *.txt off 2>/dev/null; cd - > /dev/null; }
mkdir -p "$O/off"
timeout 240 "$P/bin/cuda_kernels_test" --gtest_filter='Fp8TmaTest.*' > "$O/conf.log" 2>&1
echo "conf rc $? at ${SECONDS}s"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|n192 vs wide|tail-heavy" "$O/conf.log" | head -20
grep -E "Failure|Expected|Which is" "$O/conf.log" | head -10; save
pen() {
  PENSTOCK_FP8_OFFSETS_DIR=$O/off PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=16384 timeout 100 \
    "$P/bin/penstock_bench_kernels" --only fp8 > "$O/$1.jsonl" 2> "$O/$1.err"
  echo "pen $1 rc $? at ${SECONDS}s"
  python3 - "$O/$1.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r = json.loads(l)
    if r.get('bench', '').startswith('fp8_grouped'):
        print(f"  {r['shape']:26s} {r.get('variant', ''):18s} {r.get('time_us', 0):9.1f} us {r.get('tflops', 0):7.1f} TFLOP/s")
PY
}
pen pen1; save
PENSTOCK_FP8_N192_STORE=0 pen pen1r; save  # n192 with register stores (the TMA store's share)
f8() { PENSTOCK_FP8_N192=$1 layer s58a "dsv3f8.n$1.$2" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; save; }
glm() { PENSTOCK_FP8_N192=$1 layer s58a "glm.n$1.$2" glm-5.3.json 6:7 16384 --fp8-weights native --dsa-fp8-indexer \
  --dsa-fp8-accumulate; save; }
f8 0 1; f8 1 1; f8 1 2; f8 0 2
pen pen2; save
glm 0 1; glm 1 1; glm 1 2; glm 0 2
pen pen3; save
if [ "${SECONDS}" -lt 330 ]; then
  R=$(pwd); export CUDA_HOME=/usr/local/cuda
  mkdir -p /tmp/dg211 && tar -xJf build-dg/dg211.tar.xz -C /tmp/dg211
  cd /tmp/dg211/DeepGEMM && rm -rf build ./*.so deep_gemm/*.so && cp -r third-party/cutlass/include/cute \
    third-party/cutlass/include/cutlass deep_gemm/include/ && echo 'persistent_envs = dict()' > deep_gemm/envs.py
  # the system g++ for compile and link (session 57: the default g++ wrapper's extension crashed at import)
  CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/g++ -shared" MAX_JOBS=16 timeout 150 python3 setup.py \
    build_ext --inplace > "$O/build.dg.log" 2>&1; echo "dg build rc $? at ${SECONDS}s"; cd "$R"
  DG_SKIP_BF16=1 PYTHONPATH=/tmp/dg211/DeepGEMM DG_JIT_CACHE_DIR=/tmp/dgc timeout 120 python3 \
    docs/perf/2026-12-07-s57/deepgemm_grouped.py "$O/off" 16384 > "$O/dg.jsonl" 2> "$O/dg.err"
  echo "dg rc $? at ${SECONDS}s"; tail -2 "$O/dg.err" | cut -c1-200
  python3 - "$O/dg.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    try:
        r = json.loads(l)
    except ValueError:
        continue
    if 'shape' in r:
        print(f"  {r['shape']:26s} deepgemm kineto {r['kernel_us_kineto']:9.1f} us {r['tflops_kineto']:7.1f} | "
              f"events {r['events_median_us']:9.1f} us {r['tflops_events']:7.1f} TFLOP/s | padded {r['padded_rows']}")
PY
  save
fi
date -u
