#!/usr/bin/env bash
# Session 50, call C (any GPU): bundle s50b (d04a82a + the FP8 GEMM's scales loaded one k-step ahead by pointers that
# step along the k blocks) beside s50a (d04a82a) in the same call: the FP8 GEMM conformance on s50b, then the grouped
# DeepSeek-V3 expert GEMMs at T = 16384 (penstock_bench_kernels --only fp8) and the DeepSeek-V3 FP8 layer (native FP8
# + --fp8-attention) and GLM-5.3 FP8 layer at 16K, the two binaries alternated.
set -uo pipefail
NAME=s50b; O=/tmp/out.s50c; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s50c.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" 'Fp8Test.*Gemm*:Fp8TmaTest.*' 240 || { save; exit 0; }
save
fp8_lines() {  # the grouped variants' median us and TFLOP/s of one bench output
  python3 - "$1" "$2" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r = json.loads(l)
    if r.get('bench') != 'fp8_grouped_gemm': continue
    print(f"  {sys.argv[2]} {r['shape'][:12]:12s} {r['variant']:18s} {r['time_us']:9.1f} us {r.get('tflops', 0):7.1f} TFLOP/s")
PY
}
for r in 1 2; do
  for b in s50a s50b; do
    PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=16384 timeout 120 "/tmp/s/$b/bin/penstock_bench_kernels" --only fp8 \
      > "$O/fp8.$r.$b.jsonl" 2> "$O/fp8.$r.$b.err.log"
    echo "fp8 bench $b round $r rc $? at ${SECONDS}s"; fp8_lines "$O/fp8.$r.$b.jsonl" "$b"
  done
done
save
for r in 1 2 3; do
  for b in s50a s50b; do
    LAYER_REPS=6 layer $b dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  done
done
save
G=(--fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate)
for r in 1 2; do
  for b in s50a s50b; do LAYER_REPS=6 layer $b glm16.$r glm-5.3.json 6:7 16384 "${G[@]}"; done
done
save
