#!/usr/bin/env bash
# Session 16, call D: the FP8 attention writing o_proj's e4m3 rows (AttentionParams::out_scale). Fp8AttentionTest.*
# (the epilogue and the composed path bit-exact against bf16 + fp8_act_quant), the whole cuda_kernels_test, then the
# interleaved layer A/B (dsv3na, k3mlana) against call C's binary (the same code without the fusion).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s16d.tar.xz -C /tmp/s
P=/tmp/s/s16d; O=/tmp/s16d; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
run_test() {  # binary filter timeout
  timeout $3 $P/bin/$1 --gtest_filter="$2" > $O/$1.log 2>&1; echo "$1 rc $? at ${SECONDS}s"
  grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$1.log | head -8
  echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$1.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$1.log)"
  grep -E "FAIL" $O/$1.log | head -5
  grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$1.log > $O/$1.conf.log; rm $O/$1.log
}
run_test cuda_attention_cudnn_test 'Fp8AttentionTest.*' 120
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench_s16c default" LAYERS="dsv3na k3mlana" REPS=8 ROUNDS=3 RUN_TIMEOUT=40 \
  timeout 100 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
run_test cuda_kernels_test '*' 240
tar -C /tmp -cJf $OUT/s16d.tar.xz s16d
