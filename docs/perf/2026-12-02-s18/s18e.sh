#!/usr/bin/env bash
# Session 18, call E (branch wip/fp8-pair-units): the FP8 grouped GEMM's CTA pairs (kWgmmaTmaPair) on the bf16
# kTmaDynCluster's pair units (weight- or activation-shared tiles, no idle rank) with CTA-scope peer releases: the FP8
# GEMM tests, the FP8 bench (wide vs pair), then the FP8 layers interleaved, PENSTOCK_FP8_PAIR=0 vs 1.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s18e.tar.xz -C /tmp/s
P=/tmp/s/s18e; O=$OUT/s18e; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_kernels_test
timeout 120 $P/bin/$t --gtest_filter='Fp8Test.*Gemm*:Fp8TmaTest.*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|OK \]" $O/$t.log | head -12
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -iE "pair" $O/$t.log | head -8
grep -E "OK \]|PASSED|FAILED|\[conf\]|pair" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
timeout 90 $P/bin/penstock_bench_kernels --only fp8 > $O/fp8.jsonl 2>$O/fp8.err; echo "fp8 bench rc $? at ${SECONDS}s"
python3 - $O/fp8.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    try: r=json.loads(l)
    except Exception: continue
    if r.get('bench')!='fp8_grouped_gemm': continue
    print(' ', r.get('shape'), r.get('tokens'), r.get('variant'), round(r.get('tflops',0)), r.get('max_abs_diff_vs_cublaslt_16rows', r.get('max_rel_diff_fp8_vs_bf16_16rows','')))
PY
left=$((330 - SECONDS)); [ $left -gt 110 ] && left=110
PKG=$P OUT=/tmp/ab MODES="default PENSTOCK_FP8_PAIR=1" LAYERS="dsv3na glmn" REPS=12 ROUNDS=2 RUN_TIMEOUT=40 \
  timeout $left bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat /tmp/ab/ab.log | tee $O/ab.log
tar -C /tmp -cJf $O/ab.tar.xz ab
