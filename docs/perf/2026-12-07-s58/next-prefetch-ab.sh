#!/usr/bin/env bash
# Prepared in session 58 for the next device call (not run yet): next-scale-prefetch.diff against HEAD. Bundles (build
# both, then pack): NAME=pfA from HEAD, pfB from HEAD + `git apply docs/perf/2026-12-07-s58/next-scale-prefetch.diff`:
#   BUNDLE_BINS="penstock_model_bench penstock_bench_kernels cuda_kernels_test" tools/pack_session_bundle.sh build-cuda pfB "prefetch" pfA
# Steps: conformance of pfB (Fp8TmaTest.*), the kernel bench A/B interleaved three times (DeepSeek-V3 experts, T 16384),
# the DeepSeek-V3 FP8 layer A/B twice, then Nsight Compute on the grouped n192 gate_up of each (the shape filter names
# "dsv3 gate_up" so that the dense shared-expert gate_up is not matched first, as in session 58's call C).
#   run: bash docs/perf/2026-12-07-s58/next-prefetch-ab.sh, carry build-dev-lead/pfB.tar.xz
set -uo pipefail
NAME=pfB; O=/tmp/out.pf; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/pf.tgz" *.log *.json *.jsonl *.txt 2>/dev/null; cd - > /dev/null; }
timeout 240 /tmp/s/pfB/bin/cuda_kernels_test --gtest_filter='Fp8TmaTest.*' > "$O/conf.log" 2>&1
echo "conf rc $? at ${SECONDS}s"; grep -E "^\[  (PASSED|FAILED) |n192 vs wide" "$O/conf.log"; save
pen() {  # pen BUNDLE ROUND
  PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=16384 timeout 60 "/tmp/s/$1/bin/penstock_bench_kernels" --only fp8 \
    > "$O/pen.$1.$2.jsonl" 2> "$O/pen.$1.$2.err"
  echo "pen $1 round $2 rc $? at ${SECONDS}s"
  python3 - "$O/pen.$1.$2.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench', '').startswith('fp8_grouped') and r.get('variant') != 'wgmma':
            print(f"  {r['shape']:26s} {r.get('variant', ''):18s} {r.get('time_us', 0):9.1f} us {r.get('tflops', 0):7.1f}")
PY
  save
}
for r in 1 2 3; do pen pfA $r; pen pfB $r; done
for r in 1 2; do
  for b in pfA pfB; do layer "$b" "dsv3f8.$r" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; save; done
done
for b in pfA pfB; do
  PENSTOCK_FP8_BENCH_SHAPE="dsv3 gate_up" PENSTOCK_FP8_BENCH_T=16384 NCU_TIMEOUT=90 \
    ncu_sass "ncu_n192.$b" n192 "/tmp/s/$b/bin/penstock_bench_kernels" --only fp8; save
done
date -u
