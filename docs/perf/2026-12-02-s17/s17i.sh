#!/usr/bin/env bash
# Session 17, call I: the bf16 grouped GEMM's kTmaCluster (static order, weight multicast) with the peer's stage
# release at CTA scope instead of the cluster-scope fence: GroupedGemm* conformance, then the grouped bench
# (tma_cluster, tma, tma_dyn and cuBLASLt in the same run).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s17i.tar.xz -C /tmp/s
P=/tmp/s/s17i; O=$OUT/s17i; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_kernels_test
timeout 60 $P/bin/$t --gtest_filter='GroupedGemm*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -5; echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -i "cluster" $O/$t.log | head -6
PENSTOCK_BENCH_GG_KERNELS=tma_cluster,tma,tma_dyn timeout 100 $P/bin/penstock_bench_kernels --only grouped > $O/grouped.jsonl 2>$O/grouped.err
echo "grouped bench rc $? at ${SECONDS}s"
python3 - <<PY
import json
for l in open('$O/grouped.jsonl'):
    try: r=json.loads(l)
    except Exception: continue
    print(' ', r.get('model'), r.get('proj'), r.get('tokens'), r.get('variant'), round(r.get('tflops',0)), round(r.get('ms',0),3))
PY
