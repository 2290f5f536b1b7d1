#!/usr/bin/env bash
# Session 26, call I: the FP8 GEMM's 128 x 192 tile (kWgmmaTma192: one m64n192k32 chain per k-step and warpgroup):
# the FP8 conformance with the new variant (dense and grouped cases, tail-heavy routing), the fp8 kernel bench (all
# variants in one process), then the DeepSeek-V3 FP8 layer at 16K with kAuto's plain FP8 GEMMs on the 192 tile
# (PENSTOCK_FP8_TILE_N=192) against the default, alternated.
set -uo pipefail
N=${NAME:-s26i}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/out.$N; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
timeout 100 $P/bin/cuda_kernels_test --gtest_filter='Fp8TmaTest.*:Fp8Test.*' > $O/conf.log 2>&1
rc=$?
echo "Fp8 tests rc $rc at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED, $(grep -c 'n192' $O/conf.log) n192 lines"
grep -E "^\[  FAILED|FAIL|Failure" $O/conf.log | head -8
timeout 60 $P/bin/penstock_bench_kernels --only fp8 > $O/fp8.jsonl 2>&1
echo "fp8 bench rc $? at ${SECONDS}s"
python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench') in ('fp8_grouped_gemm', 'fp8_gemm') and 'tma' in r.get('variant', ''):
            print(f\"  {r['bench'][:16]:16s} {r.get('variant'):16s} {r.get('shape','')[:26]:26s} T{r.get('tokens')}: {r.get('time_us',0)/1000:.3f} ms {r.get('tflops',0):.0f} TFLOP/s\")
" $O/fp8.jsonl
if [ $rc -eq 0 ]; then
  for round in 1 2; do
    for mode in default 192; do
      if [ $mode = 192 ]; then export PENSTOCK_FP8_TILE_N=192; else unset PENSTOCK_FP8_TILE_N; fi
      timeout 60 $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --layers 3:4 --tokens 16384 --reps 8 \
        --fp8-weights native --fp8-attention --breakdown --json $O/dsv3.$mode.$round.json > $O/dsv3.$mode.$round.log 2>&1
      echo "dsv3 fp8 $mode $round rc $?: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (down {b.get('layer.moe.experts.down', 0):.2f}, gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f})\")" $O/dsv3.$mode.$round.json 2>/dev/null)"
    done
  done
  unset PENSTOCK_FP8_TILE_N
fi
cd $O && tar czf ${OUT:-/tmp}/$N.tgz *
