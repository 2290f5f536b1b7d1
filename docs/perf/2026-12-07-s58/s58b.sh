#!/usr/bin/env bash
# Session 58, call B (any GPU): the banded tile order (PENSTOCK_FP8_BAND=m: tiles band of m m-tiles by band, then
# n-tile, then m-tile; tile::decode_group_tile_banded) for the single-CTA FP8 TMA kernels (kWgmmaTmaWide,
# kWgmmaTmaN192). Call A left DeepGEMM 1.24x ahead on the down GEMM with the same tile, mainloop and TMA-store
# epilogue; its static schedule runs bands of m-blocks, where Penstock's group-major order has ~33 CTAs reading one
# expert's activation tile at once. Conformance with BAND=16 (the reference, byte equality, tail-heavy launches),
# the kernel bench at BAND 0 / 8 / 16 / 32 twice, then the DeepSeek-V3 and GLM-5.3 FP8 layers at 16K, default vs
# N192=1 + BAND=16 + PAIR=0 (the gated GEMM on single CTAs, banded) vs N192=1 + BAND=16.
#   run: bash docs/perf/2026-12-07-s58/s58b.sh, carry build-dev-lead/s58b.tar.xz
set -uo pipefail
NAME=s58b; O=/tmp/out.s58b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s58b.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
PENSTOCK_FP8_BAND=16 timeout 150 "$P/bin/cuda_kernels_test" --gtest_filter='Fp8TmaTest.Grouped*' > "$O/conf.log" 2>&1
echo "conf rc $? at ${SECONDS}s"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|n192 vs wide|tail-heavy" "$O/conf.log" | head -20
grep -E "Failure|Expected|Which is" "$O/conf.log" | head -10; save
pen() {
  PENSTOCK_FP8_BAND=$1 PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=16384 timeout 60 \
    "$P/bin/penstock_bench_kernels" --only fp8 > "$O/pen.b$1.$2.jsonl" 2> "$O/pen.b$1.$2.err"
  echo "pen band $1 round $2 rc $? at ${SECONDS}s"
  python3 - "$O/pen.b$1.$2.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r = json.loads(l)
    if r.get('bench', '').startswith('fp8_grouped') and r.get('variant') in ('wgmma_tma_wide', 'wgmma_tma_pair', 'wgmma_tma_n192', 'glu_fused'):
        print(f"  {r['shape']:26s} {r.get('variant', ''):18s} {r.get('time_us', 0):9.1f} us {r.get('tflops', 0):7.1f} TFLOP/s")
PY
  save
}
for r in 1 2; do for b in 0 8 16 32; do pen $b $r; done; done
f8() { ( export $2; layer s58b "dsv3f8.$1.$3" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention ); save; }
glm() { ( export $2; layer s58b "glm.$1.$3" glm-5.3.json 6:7 16384 --fp8-weights native --dsa-fp8-indexer \
  --dsa-fp8-accumulate ); save; }
D="PENSTOCK_FP8_N192=0"; NB="PENSTOCK_FP8_N192=1 PENSTOCK_FP8_BAND=16"; NBP="$NB PENSTOCK_FP8_PAIR=0"
for r in 1 2; do f8 def "$D" $r; f8 nb "$NB" $r; f8 nbp "$NBP" $r; done
for r in 1 2; do glm def "$D" $r; glm nb "$NB" $r; glm nbp "$NBP" $r; done
date -u
