#!/usr/bin/env bash
# Session 17, call H: the CTA-pair FP8 GEMM with the peers' stage releases at CTA scope (mbar_arrive_remote) instead
# of a cluster-scope release: Fp8* conformance, the FP8 GEMM bench (PENSTOCK_FP8_PAIR=1, twice), the FP8 layers with
# PENSTOCK_FP8_PAIR=0 / 1 interleaved.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s17h.tar.xz -C /tmp/s
P=/tmp/s/s17h; O=/tmp/s17h; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
for r in 1 2; do
  PENSTOCK_FP8_PAIR=1 timeout 60 $P/bin/penstock_bench_kernels --only fp8 > $O/fp8.$r.jsonl 2>/dev/null; echo "bench $r rc $? at ${SECONDS}s"
done
python3 - <<PY
import json,glob,collections
d=collections.defaultdict(list)
for f in sorted(glob.glob('$O/fp8.*.jsonl')):
    for l in open(f):
        try: r=json.loads(l)
        except Exception: continue
        if r.get('variant') not in ('wgmma_tma_wide','wgmma_tma_pair','glu_fused','cublaslt'): continue
        d[(r['bench'], r.get('shape'), r.get('tokens'), r['variant'])].append(round(r['tflops']))
for k,v in sorted(d.items()): print(k, v)
PY
PKG=$P OUT=$O/ab MODES="PENSTOCK_FP8_PAIR=0 PENSTOCK_FP8_PAIR=1" LAYERS="dsv3na glmn" REPS=16 ROUNDS=2 RUN_TIMEOUT=40 \
  timeout 100 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
t=cuda_kernels_test
timeout 100 $P/bin/$t --gtest_filter='Fp8*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -8
grep -E "pair kernel vs|tail-heavy" $O/$t.log | head -8
grep -E "^\[conf\]|PASSED|FAILED|OK \]|\[fp8\]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
tar -C /tmp -cJf $OUT/s17h.tar.xz s17h
