#!/usr/bin/env bash
# Session 18, call A: the bf16 grouped GEMM conformance (Kernels/GroupedGemmKernelTest.*: session 17's kTmaCluster
# with CTA-scope peer releases, never run; the new kTmaDynCluster; GroupedGemmDeviceTest.*: tail-heavy launches and
# the fused GLU on pairs), the grouped bench (cuBLASLt, kTmaDyn, kTmaDynCluster, kTmaCluster, the fused GLU single /
# pairs), then interleaved layer A/Bs: the bf16 DeepSeek-V3 / GLM-5.3 layers with the experts on cuBLASLt (default at
# 16K), on kTmaDyn (PENSTOCK_GROUPED_GEMM=device) and on kTmaDynCluster (+ PENSTOCK_GG_PAIRS=1).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s18a.tar.xz -C /tmp/s
P=/tmp/s/s18a; O=$OUT/s18a; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_kernels_test
timeout 150 $P/bin/$t --gtest_filter='Kernels/GroupedGemmKernelTest.*:GroupedGemmDeviceTest.*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|OK \]" $O/$t.log | head -20
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "\[conf\].*FAIL" $O/$t.log | head -5
grep -E "tma_dyn_cluster|tma_cluster" $O/$t.log | head -8
PENSTOCK_BENCH_GG_KERNELS=tma_dyn,tma_dyn_cluster,tma_cluster,glu_dyn,glu_dyn_cluster timeout 120 $P/bin/penstock_bench_kernels --only grouped > $O/grouped.jsonl 2>$O/grouped.err
echo "grouped bench rc $? at ${SECONDS}s"
grep "glu pair" $O/grouped.jsonl $O/grouped.err | head
python3 - <<PY
import json
for l in open('$O/grouped.jsonl'):
    try: r=json.loads(l)
    except Exception: continue
    print(' ', r.get('model'), r.get('proj'), r.get('tokens'), r.get('variant'), round(r.get('tflops',0)), r.get('cluster_ctas',''), r.get('max_abs_diff_vs_cublaslt_64rows',''))
PY
left=$((570 - SECONDS)); [ $left -gt 330 ] && left=330
PKG=$P OUT=$O/ab MODES="default PENSTOCK_GROUPED_GEMM=device PENSTOCK_GROUPED_GEMM=device,PENSTOCK_GG_PAIRS=1" LAYERS="dsv3 glm" REPS=12 ROUNDS=2 RUN_TIMEOUT=40 \
  timeout $left bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
