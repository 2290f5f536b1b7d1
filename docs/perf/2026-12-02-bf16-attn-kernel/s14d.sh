#!/usr/bin/env bash
# Session 14, call D (the final kernel code): the GPU test binaries (cuda_attention_cudnn_test: the bf16 and FP8
# wgmma kernels, cuDNN, the fallbacks; cuda_kernels_test; cuda_runtime_test), then the DeepSeek-V3 layer (bf16 and
# native FP8 weights) beside its torch.compile composition in the same call (tools/session_gpu_check.sh), then an
# interleaved A/B of the bf16 layer with Penstock's bf16 attention kernel vs cuDNN's SDPA, and the FP8-attention layer.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s14d.tar.xz -C /tmp/s
P=/tmp/s/s14d; O=/tmp/s14d; mkdir -p $O/sc
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
for t in cuda_attention_cudnn_test cuda_kernels_test cuda_runtime_test; do
  timeout 220 $P/bin/$t > $O/$t.log 2>&1; echo "$t rc $?"
  grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -5
  echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
done
for t in cuda_attention_cudnn_test cuda_kernels_test cuda_runtime_test; do grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log; done
PKG=$P OUT=$O/sc FILTER=none BENCHES="dsv3" TORCH_MODELS="deepseek-v3" REPS=8 TORCH_TIMEOUT=170 \
  timeout 230 bash $P/tools/session_gpu_check.sh 2>&1 | tee $O/session_check.log
PKG=$P OUT=$O/ab MODES="default PENSTOCK_ATTENTION_KERNEL=cudnn" LAYERS="dsv3 dsv3na" REPS=5 ROUNDS=2 RUN_TIMEOUT=60 \
  timeout 100 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s14d.tar.xz s14d
