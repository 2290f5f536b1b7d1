#!/usr/bin/env bash
# Session 36, call A: kMmaTf32 as kAuto's f32 indexer kernel (calls of >= 2 x SMs row groups).
# Bundle s36a (this session's work tree on d8c6778: tools/pack_session_bundle.sh build-cuda s36a "...").
# 1. DsaOpTest conformance (every case, the new 1100-row case takes kAuto's TF32 path on an H200);
# 2. DsaOpTest.Perf twice (tiled f32 = kAuto before, kMmaTf32 = kAuto now, same process);
# 3. GLM-5.3 layer 6 (bf16 weights, the default f32 indexer) at 16K twice and 64K once;
# 4. Nsight Compute on the TF32 kernel (what bounds it);
# 5. session 35's s35a.sh (4K / 8K layer breakdowns for `penstock plan --calibrate`).
set -uo pipefail
NAME=s36a; O=/tmp/out.s36a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
timeout 300 $P/bin/cuda_kernels_test --gtest_filter='DsaOpTest.*' > $O/dsa_test.log 2>&1
echo "DsaOpTest rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $O/dsa_test.log | tr '\n' ' '); $(grep -c '| PASS' $O/dsa_test.log) PASS, $(grep -c '| FAIL' $O/dsa_test.log) FAIL"
grep -E "^\[  FAILED|\| FAIL" $O/dsa_test.log | head -5
grep -E "rows1100|rows3_|rows530|tf32\]" $O/dsa_test.log | head -30
for round in 1 2; do
  PENSTOCK_CUDA_PERF=1 timeout 120 $P/bin/cuda_kernels_test --gtest_filter='DsaOpTest.Perf' > $O/perf.$round.log 2>&1
  echo "perf $round rc $? at ${SECONDS}s: $(grep -E '\[perf\] dsa_indexer_logits f32' $O/perf.$round.log | tr '\n' ' ')"
done
layer s36a glmbf.1 glm-5.3.json 6:7 16384 --fp8-weights dequant
layer s36a glmbf.2 glm-5.3.json 6:7 16384 --fp8-weights dequant
LAYER_REPS=3 LAYER_TIMEOUT=200 layer s36a glmbf64k glm-5.3.json 6:7 65536 --fp8-weights dequant
PENSTOCK_CUDA_PERF=1 ncu_sass tf32 tf32 $P/bin/cuda_kernels_test --gtest_filter=DsaOpTest.Perf
cd $O && tar czf ${OUT:-/tmp}/s36a.tgz *.log *.json *.txt 2>/dev/null; cd - > /dev/null
[ "${SECONDS}" -lt 330 ] || exit 0
O=/tmp/out.s35; mkdir -p $O
sed -e 's/^NAME=s35a; O=\/tmp\/out.s35; source tools\/device_bundle_env.sh/NAME=s36a; O=\/tmp\/out.s35; source tools\/device_bundle_env.sh/' \
    -e 's/layer s35a /layer s36a /' docs/perf/2026-12-05-s35/s35a.sh > /tmp/s35a.sh
bash /tmp/s35a.sh
