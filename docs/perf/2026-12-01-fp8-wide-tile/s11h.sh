#!/usr/bin/env bash
# Session 11, call H: the wide FP8 kernel with 64-column wgmma quarters in two register buffers
# (PENSTOCK_FP8_WGMMA_N64=1) vs the halves schedule: conformance under the knob, the fp8 bench both ways, layer A/B.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s11.tar.xz -C /tmp/s && tar -xJf build-dev-lead/s11q.tar.xz -C /tmp/s
P=/tmp/s/s11; cp /tmp/s/s11q/bin/* $P/bin/
O=/tmp/s11h; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
PENSTOCK_FP8_WGMMA_N64=1 timeout 150 $P/bin/cuda_kernels_test --gtest_filter='Fp8*' > $O/fp8_test_n64.log 2>&1; echo "n64 tests rc $?"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|glu .*wide" $O/fp8_test_n64.log | head
for r in 1 2; do for q in 0 1; do
  PENSTOCK_FP8_WGMMA_N64=$q timeout 80 $P/bin/penstock_bench_kernels --only fp8 2>/dev/null | python3 -c "
import json,sys
rows=[json.loads(l) for l in sys.stdin if l.startswith('{')]
print('n64=$q', ' '.join(f\"{r['shape'][5:9]}{r['tokens']//1024}K/{r['variant'][-6:]}:{r['tflops']:.0f}\" for r in rows if r.get('bench')=='fp8_grouped_gemm' and r.get('variant') in ('wgmma_tma_wide','glu_fused')))
" | tee -a $O/bench_ab.log
done; done
PKG=$P OUT=$O/ab MODES="default PENSTOCK_FP8_WGMMA_N64=1" LAYERS="dsv3n glmn" REPS=8 ROUNDS=3 RUN_TIMEOUT=60 timeout 200 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s11h.tar.xz s11h
