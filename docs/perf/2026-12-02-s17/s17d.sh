#!/usr/bin/env bash
# Session 17, call D (commit 61db628: the plan cache, the indexer's per-lane row sums, both indexer kernels
# free-running): the whole cuda_kernels_test; DeepSeek-V3 and GLM-5.3 layers beside their torch.compile compositions
# in the same call (tools/session_gpu_check.sh); the interleaved layer A/B against session 16's call C binary.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s17d.tar.xz -C /tmp/s
P=/tmp/s/s17d; O=/tmp/s17d; mkdir -p $O/sc
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_kernels_test
timeout 240 $P/bin/$t --gtest_filter='*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -8
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "\[conf\].*FAIL" $O/$t.log | head -5
grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
PKG=$P OUT=$O/sc FILTER=none BENCHES="dsv3 glm" TORCH_MODELS="deepseek-v3 glm-5.3" REPS=8 TORCH_TIMEOUT=170 \
  timeout 330 bash $P/tools/session_gpu_check.sh 2>&1 | tee $O/session_check.log | grep -v "^ *warnings.warn\|UserWarning" | tail -30
echo "session check done at ${SECONDS}s"
left=$((575 - SECONDS)); [ $left -gt 110 ] && left=110
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench_s16c default" LAYERS="dsv3 dsv3na glm glmn" REPS=16 ROUNDS=2 RUN_TIMEOUT=40 \
  timeout $left bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s17d.tar.xz s17d
