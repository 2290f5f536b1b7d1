#!/usr/bin/env bash
# Session 17, call A: (1) session 16's unverified Fp8AttentionTest.* (the f32 out_scale_from composed path) on the
# current code; (2) the grouped-GEMM conformance with the cuBLASLt loop on 2 streams and the plan cache; (3) the
# interleaved layer A/B: session 16's binary vs the plan cache with 1 / 2 / 3 streams (bf16 DeepSeek-V3 and GLM-5.3).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s17a.tar.xz -C /tmp/s
P=/tmp/s/s17a; O=/tmp/s17a; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_attention_cudnn_test
timeout 150 $P/bin/$t --gtest_filter='Fp8AttentionTest.*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -8
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "\[conf\].*FAIL" $O/$t.log | head -5
echo "  out_scale lines: $(grep -c 'out_scale.*PASS' $O/$t.log) PASS, f32 composed: $(grep -c 'f32, composed.*PASS' $O/$t.log)"
grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
t=cuda_kernels_test
timeout 120 $P/bin/$t --gtest_filter='GroupedGemm*:GemmOpTest.*:MoeOpTest.*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -8
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench_s16c PENSTOCK_GROUPED_GEMM_STREAMS=1 PENSTOCK_GROUPED_GEMM_STREAMS=2 PENSTOCK_GROUPED_GEMM_STREAMS=3" \
  LAYERS="dsv3 glm" REPS=8 ROUNDS=3 RUN_TIMEOUT=40 timeout 300 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
python3 - <<PY
import json,glob,collections,statistics
d=collections.defaultdict(list)
for f in sorted(glob.glob('$O/ab/*.json')):
    b,m,r,_=f.split('/')[-1].split('.')
    for rec in json.load(open(f)):
        sc={x['scope']:x['median_ms'] for x in rec.get('breakdown',[])}
        d[(b,m)].append((rec['median_ms'],sc.get('layer.moe.experts.gate_up_act',0),sc.get('layer.moe.experts.down',0),sc.get('layer.attn.core.attention',0)))
for k,v in sorted(d.items()):
    print(k, 'layer', [round(x[0],2) for x in v], 'gate_up_act', [round(x[1],2) for x in v], 'down', [round(x[2],2) for x in v], 'attn', [round(x[3],2) for x in v])
PY
tar -C /tmp -cJf $OUT/s17a.tar.xz s17a
