#!/usr/bin/env bash
# Session 54, call A: the goal rows with the TMA-store epilogues switched by their environment variables (bundle s53b,
# the archive s53b.sh ran; no rebuild). Run after s53b.sh, best on an H200 (the rows the goals name): DeepSeek-V3
# layer 3 at 16K, bf16 (--fp8-weights dequant; PENSTOCK_GG_TMA_STORE) and native FP8 + --fp8-attention
# (PENSTOCK_FP8_TMA_STORE), each with St 1 and 0, around torch.compile's composition
# (tools/torch_layer_baseline.py) in the same call; then, time allowing, every FP8 GEMM shape at T 16384 (the dense
# projections too: cuBLASLt, the register-store and the TMA-store wgmma forms).
#   run: bash docs/perf/2026-12-07-s54/s54a.sh, carry build-dev-lead/s53b.tar.xz
set -uo pipefail
NAME=s53b; O=/tmp/out.s54a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s54a.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
row() { LAYER_REPS=6 tma_store_layer s53b "$@"; }  # row fp8|bf16 ST ROUND
row bf16 1 1; row bf16 0 1; row fp8 1 1; row fp8 0 1; save
torch_layer deepseek-v3 16384 170; save
row bf16 0 2; row bf16 1 2; row fp8 0 2; row fp8 1 2; save
[ "${SECONDS}" -lt 480 ] || exit 0
PENSTOCK_FP8_BENCH_T=16384 timeout $((570 - SECONDS)) "$P/bin/penstock_bench_kernels" --only fp8 > "$O/fp8all.jsonl" 2> "$O/fp8all.err.log"
echo "fp8 bench (all shapes) rc $? at ${SECONDS}s"
python3 - "$O/fp8all.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if 'time_us' in r and r.get('bench', '').startswith('fp8'):
            print(f"  {r['bench']:17s} {r.get('shape', '')[:26]:26s} {r.get('variant', ''):18s} {r['time_us']:9.1f} us {r.get('tflops', 0):7.1f} TFLOP/s")
PY
cd "$O" && tar czf "${OUT:-/tmp}/s54a.tgz" *.log *.json *.jsonl 2>/dev/null
