#!/usr/bin/env bash
# Session 11, call J: fp8_act_quant's 8-wide kernel with 32-bit index math: its conformance (ActQuant*, the tie test),
# the act-quant bench old / new back to back twice, and the DeepSeek-V3 / GLM-5.3 FP8 layers old / new interleaved.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s11.tar.xz -C /tmp/s && tar -xJf build-dev-lead/s11q.tar.xz -C /tmp/s
P=/tmp/s/s11; cp $P/bin/penstock_model_bench $P/bin/penstock_model_bench.old; cp /tmp/s/s11q/bin/* $P/bin/
O=/tmp/s11j; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='Fp8*' > $O/fp8_test.log 2>&1; echo "fp8 tests rc $?"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tie test" $O/fp8_test.log | head
for r in 1 2; do for b in penstock_bench_kernels.old penstock_bench_kernels; do
  timeout 80 $P/bin/$b --only fp8 2>/dev/null | python3 -c "
import json,sys
rows=[json.loads(l) for l in sys.stdin if l.startswith('{')]
print('$b', ' '.join(f\"{r['shape'][:6]}/{r['rows']//1024}K:{r['time_us']:.1f}us\" for r in rows if r.get('bench')=='fp8_act_quant'))
" | tee -a $O/actq_ab.log
done; done
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench.old default" LAYERS="dsv3n glmn" REPS=8 ROUNDS=3 RUN_TIMEOUT=60 timeout 200 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s11j.tar.xz s11j
