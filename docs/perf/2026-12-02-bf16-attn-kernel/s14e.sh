#!/usr/bin/env bash
# Session 14, call E: cuda_attention_cudnn_test with the bf16 kernel's ping-pong-off pass added, then the Kimi K3 MLA
# layer (bf16 weights) beside its torch.compile composition in the same call (tools/session_gpu_check.sh).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s14e.tar.xz -C /tmp/s
P=/tmp/s/s14e; O=/tmp/s14e; mkdir -p $O/sc
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_attention_cudnn_test
timeout 200 $P/bin/$t > $O/$t.log 2>&1; echo "$t rc $?"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -5
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log) no_pingpong PASS $(grep -c 'no_pingpong.*PASS' $O/$t.log)"
grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
PKG=$P OUT=$O/sc FILTER=none BENCHES="k3mla" TORCH_MODELS="kimi-k3-mla" REPS=8 TORCH_TIMEOUT=200 \
  timeout 260 bash $P/tools/session_gpu_check.sh 2>&1 | tee $O/session_check.log
tar -C /tmp -cJf $OUT/s14e.tar.xz s14e
