#!/usr/bin/env bash
# Session 12, call C (the final code): cuda_runtime_test; DeepSeek-V3 and GLM-5.3 layers (bf16 and native FP8 weights)
# beside the torch.compile compositions of the same layers in the same call (tools/session_gpu_check.sh); then the
# interleaved A/B against session 11's build.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s11mb.tar.xz -C /tmp/s && tar -xJf build-dev-lead/s12c.tar.xz -C /tmp/s
P=/tmp/s/s12c; cp /tmp/s/s11mb/bin/penstock_model_bench $P/bin/penstock_model_bench.s11
O=/tmp/s12c; mkdir -p $O/sc
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
timeout 100 $P/bin/cuda_runtime_test > $O/runtime_test.log 2>&1; echo "runtime rc $?"; tail -1 $O/runtime_test.log
PKG=$P OUT=$O/sc FILTER=none BENCHES="dsv3 glm" TORCH_MODELS="deepseek-v3 glm-5.3" REPS=8 TORCH_TIMEOUT=170 \
  timeout 420 bash tools/session_gpu_check.sh 2>&1 | tee $O/session_check.log
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench.s11 default" LAYERS="dsv3n glmn" REPS=8 ROUNDS=3 RUN_TIMEOUT=60 timeout 100 bash tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s12c.tar.xz s12c
