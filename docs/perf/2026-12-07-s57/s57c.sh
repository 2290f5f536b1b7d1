#!/usr/bin/env bash
# Session 57, call C (any GPU): session 52's A-from-registers form of the 256-wide FP8 GEMMs
# (docs/perf/2026-12-06-s52/a_regs.patch: each k-step's A fragments loaded once by ldmatrix and read by both halves'
# chains, so A leaves shared memory once per k-step instead of once per chain) with the register split moved from
# setmaxnreg 40 / 232 to 24 / 240, where ptxas no longer spills it (single CTAs: 0 bytes; CTA pairs: 8 bytes; at
# 40 / 232 it spilled 12-44 bytes) -- bundle s57c -- beside the landed kernels (bundle s57a, de53f24).
# 1. conformance on s57c: Fp8Test.* and Fp8TmaTest.* (every variant against the reference, the GLU bit-exact with the
#    unfused path); stops on a failure;
# 2. the kernel bench's DeepSeek-V3 expert GEMMs at T 16384, s57a / s57c / s57c / s57a;
# 3. DeepSeek-V3 layer 3 at 16K, native FP8 + FP8 attention, s57a / s57c alternated, 3 rounds (8 reps each);
#    GLM-5.3 layer 6 at 16K (native FP8, FP8 indexer, fp8-accumulate) 2 rounds if time is left.
#   run: bash docs/perf/2026-12-07-s57/s57c.sh, carry build-dev-lead/s57c.tar.xz
set -uo pipefail
NAME=s57c; O=/tmp/out.s57c; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s57c.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" 'Fp8Test.*:Fp8TmaTest.*' 200 \
  || { grep -E 'differ|FAILED|Failure|mismatch' "$O/conf.log" | head -12; save; exit 0; }
save
pen() {  # pen BUNDLE ROUND
  PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=16384 timeout 100 "/tmp/s/$1/bin/penstock_bench_kernels" \
    --only fp8 > "$O/pen.$1.$2.jsonl" 2> "$O/pen.$1.$2.err"
  echo "pen $1 $2 rc $? at ${SECONDS}s"
  python3 - "$O/pen.$1.$2.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r = json.loads(l)
    if r.get('bench', '').startswith('fp8_grouped') and r.get('variant') != 'bf16_grouped_gemm':
        print(f"  {r['shape']:26s} {r.get('variant', ''):16s} {r.get('time_us', 0):9.1f} us {r.get('tflops', 0):7.1f} "
              f"TFLOP/s")
PY
}
pen s57a 1; pen s57c 1; pen s57c 2; pen s57a 2; save
d() { LAYER_REPS=8 layer "$1" "dsv3f8.$1.$2" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; save; }
for r in 1 2 3; do d s57a $r; d s57c $r; done
if [ "${SECONDS}" -lt 200 ]; then
  g() { LAYER_REPS=6 layer "$1" "glm16.$1.$2" glm-5.3.json 6:7 16384 --fp8-weights native --dsa-fp8-indexer \
    --dsa-fp8-accumulate; save; }
  g s57a 1; g s57c 1; g s57c 2; g s57a 2
fi
date -u
