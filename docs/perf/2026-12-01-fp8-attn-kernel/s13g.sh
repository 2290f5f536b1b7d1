#!/usr/bin/env bash
# Session 13, call G: the GPU test binaries on the final tree: cuda_attention_cudnn_test (FP8 attention: the wgmma
# kernel, cuDNN, the fallbacks), cuda_kernels_test, cuda_runtime_test.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s13g.tar.xz -C /tmp/s
P=/tmp/s/s13g; O=/tmp/s13g; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
for t in cuda_attention_cudnn_test cuda_kernels_test cuda_runtime_test; do
  timeout 240 $P/bin/$t > $O/$t.log 2>&1; echo "$t rc $?"
  grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -5
  echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
done
grep "f32_out_fallback" $O/cuda_attention_cudnn_test.log
for t in cuda_attention_cudnn_test cuda_kernels_test cuda_runtime_test; do grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log; done
tar -C /tmp -cJf $OUT/s13g.tar.xz s13g
