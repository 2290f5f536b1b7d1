#!/usr/bin/env bash
# Session 16, call C (commit 1c911d7: + kWgmmaFp8 free-running by default, copy_row_bytes' last batch): conformance
# (DsaOpTest, MoeOpTest, DataMovementOpTest), the indexer bench, then DeepSeek-V3 and GLM-5.3 layers (bf16 and native
# FP8 weights) beside their torch.compile compositions in the same call (tools/session_gpu_check.sh), then the
# interleaved A/B of the bf16 and FP8 layers against session 15's call E binary.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s16c.tar.xz -C /tmp/s
P=/tmp/s/s16c; O=/tmp/s16c; mkdir -p $O/sc
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_kernels_test
timeout 100 $P/bin/$t --gtest_filter='DsaOpTest.*:MoeOpTest.*:DataMovementOpTest.*:-DsaOpTest.Perf' > $O/$t.log 2>&1
echo "$t rc $? at ${SECONDS}s"; grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -8
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
timeout 60 $P/bin/penstock_bench_kernels --only dsa 2>/dev/null | grep '"dsa_indexer_logits"' > $O/dsa.jsonl; echo "dsa bench at ${SECONDS}s"
python3 -c "
import json
for l in open('$O/dsa.jsonl'):
    r=json.loads(l); print(' ', r['tokens'], r['variant'], round(r['ms'],3), 'ms', round(r['tflops']), 'TFLOP/s')" | grep -v mma_all | head -30
PKG=$P OUT=$O/sc FILTER=none BENCHES="dsv3 glm" TORCH_MODELS="deepseek-v3 glm-5.3" REPS=8 TORCH_TIMEOUT=170 \
  timeout 400 bash $P/tools/session_gpu_check.sh 2>&1 | tee $O/session_check.log | grep -v "^ *warnings.warn\|UserWarning" | tail -30
echo "session check done at ${SECONDS}s"
left=$((570 - SECONDS)); [ $left -gt 100 ] && left=100
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench_s15e default" LAYERS="dsv3 dsv3na glmn k3mlana" REPS=8 ROUNDS=2 RUN_TIMEOUT=40 \
  timeout $left bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s16c.tar.xz s16c
