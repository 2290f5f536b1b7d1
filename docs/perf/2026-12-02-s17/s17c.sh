#!/usr/bin/env bash
# Session 17, call C: the DSA indexer with PairMap (each lane's accumulator columns are whole query rows):
# conformance (DsaOpTest, plus the GEMM tests after the plan cache), the indexer bench alternated with session 16's
# binary, then GLM-5.3 layers (bf16 weights with the FP8 indexer: kWgmma / kWgmmaFp8) interleaved against it.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s17c.tar.xz -C /tmp/s
P=/tmp/s/s17c; O=/tmp/s17c; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_kernels_test
timeout 150 $P/bin/$t --gtest_filter='DsaOpTest.*:GemmOpTest.*:GroupedGemm*:-DsaOpTest.Perf' > $O/$t.log 2>&1
echo "$t rc $? at ${SECONDS}s"; grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -8
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "\[conf\].*FAIL" $O/$t.log | head -5
grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
for r in 1 2; do
  for b in penstock_bench_kernels_s16c penstock_bench_kernels; do
    timeout 80 $P/bin/$b --only dsa 2>/dev/null | grep '"dsa_indexer_logits"' > $O/dsa.$b.$r.jsonl; echo "$b round $r at ${SECONDS}s"
  done
done
python3 - <<PY
import json,glob,collections
d=collections.defaultdict(list)
for f in sorted(glob.glob('$O/dsa.*.jsonl')):
    b=f.split('/')[-1].split('.')[1]
    for l in open(f):
        r=json.loads(l)
        if 'mma_all' in r['variant'] or r['variant'] in ('mma','mma_full_rows'): continue
        d[(r['tokens'], r['variant'], b)].append(round(r['tflops']))
for k,v in sorted(d.items()): print(k, v)
PY
left=$((560 - SECONDS)); [ $left -gt 150 ] && left=150
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench_s16c default" LAYERS="glm glmn" REPS=16 ROUNDS=3 RUN_TIMEOUT=40 \
  timeout $left bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
python3 - <<PY
import json,glob,collections
d=collections.defaultdict(list)
for f in sorted(glob.glob('$O/ab/*.json')):
    b,m,r,_=f.split('/')[-1].split('.')
    for rec in json.load(open(f)):
        sc={x['scope']:x['median_ms'] for x in rec.get('breakdown',[])}
        d[(b,m)].append((rec['median_ms'], sc.get('layer.attn.indexer.logits',0), sc.get('layer.attn.indexer',0)))
for k,v in sorted(d.items()): print(k, 'layer', [round(x[0],2) for x in v], 'indexer.logits', [round(x[1],3) for x in v], 'indexer', [round(x[2],3) for x in v])
PY
tar -C /tmp -cJf $OUT/s17c.tar.xz s17c
