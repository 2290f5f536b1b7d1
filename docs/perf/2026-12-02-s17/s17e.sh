#!/usr/bin/env bash
# Session 17, call E (commit f33e83c): the FP8 grouped GEMM on CTA pairs with the weight tile multicast
# (kWgmmaTmaPair). Fp8* conformance (the pair kernel in the grouped / dense / tail-heavy / GLU bit-exact tests), the
# FP8 GEMM bench with PENSTOCK_FP8_PAIR=1 (kWgmmaTmaWide and kWgmmaTmaPair side by side), then the FP8 layers with
# PENSTOCK_FP8_PAIR=0 / 1 interleaved.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s17e.tar.xz -C /tmp/s
P=/tmp/s/s17e; O=/tmp/s17e; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_kernels_test
timeout 150 $P/bin/$t --gtest_filter='Fp8*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -8
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "\[conf\].*FAIL|pair" $O/$t.log | head -12
tail -3 $O/$t.log
grep -E "^\[conf\]|PASSED|FAILED|OK \]|\[fp8\]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
PENSTOCK_FP8_PAIR=1 timeout 150 $P/bin/penstock_bench_kernels --only fp8 > $O/fp8.jsonl 2>$O/fp8.err; echo "fp8 bench rc $? at ${SECONDS}s"
python3 - <<PY
import json
for l in open('$O/fp8.jsonl'):
    try: r=json.loads(l)
    except Exception: continue
    if r.get('bench') not in ('fp8_grouped_gemm','fp8_gemm'): continue
    print(r['bench'], r.get('shape'), r.get('tokens'), r.get('variant'), round(r.get('tflops',0)), round(r.get('ms',0),3))
PY
left=$((570 - SECONDS)); [ $left -gt 120 ] && left=120
PKG=$P OUT=$O/ab MODES="PENSTOCK_FP8_PAIR=0 PENSTOCK_FP8_PAIR=1" LAYERS="dsv3na glmn" REPS=16 ROUNDS=3 RUN_TIMEOUT=40 \
  timeout $left bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
python3 - <<PY
import json,glob,collections
d=collections.defaultdict(list)
for f in sorted(glob.glob('$O/ab/*.json')):
    b,m,r,_=f.split('/')[-1].split('.')
    for rec in json.load(open(f)):
        sc={x['scope']:x['median_ms'] for x in rec.get('breakdown',[])}
        d[(b,m)].append((rec['median_ms'], sc.get('layer.moe.experts.gate_up_act',0), sc.get('layer.moe.experts.down',0), rec.get('energy_j_per_rep',0)))
for k,v in sorted(d.items()): print(k, 'layer', [round(x[0],2) for x in v], 'gate_up_act', [round(x[1],2) for x in v], 'down', [round(x[2],2) for x in v], 'J', [round(x[3],1) for x in v])
PY
tar -C /tmp -cJf $OUT/s17e.tar.xz s17e
