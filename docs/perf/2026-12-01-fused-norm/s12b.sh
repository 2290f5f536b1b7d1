#!/usr/bin/env bash
# Session 12, call B: the fused-norm conformance test after the test fix (padding between rows), the GEMM tests, and
# two DeepSeek-V3 FP8 layers (3:5, so that both residual adds of the first layer fold into the next norms), session 11's
# build vs this one, interleaved.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s11mb.tar.xz -C /tmp/s && tar -xJf build-dev-lead/s12.tar.xz -C /tmp/s && tar -xJf build-dev-lead/s12b.tar.xz -C /tmp/s
P=/tmp/s/s12; cp /tmp/s/s11mb/bin/penstock_model_bench $P/bin/penstock_model_bench.s11; cp /tmp/s/s12b/bin/cuda_kernels_test $P/bin/
O=/tmp/s12b; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
timeout 120 $P/bin/cuda_kernels_test --gtest_filter='RmsNorm*:GemmOp*' > $O/norm_gemm_test.log 2>&1; echo "tests rc $?"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|^\[ RUN|^\[       OK" $O/norm_gemm_test.log | head -30
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench.s11 default" LAYERS="dsv3n2" REPS=8 ROUNDS=4 RUN_TIMEOUT=90 timeout 300 bash tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s12b.tar.xz s12b
