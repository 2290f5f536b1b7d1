#!/usr/bin/env bash
# Session 10, call D: (1) mla_wgmma.cu with the shared consumer tile (branch wip/mla-wgmma-shared-consumer): MlaTcOpTest
# and the mla bench, old (main) vs new binary interleaved; (2) DeepSeek-V3 / GLM-5.3 native FP8 layers at 16K before
# (old) / after (new) the shared activation quantisation, interleaved.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s10.tar.xz -C /tmp/s; P=/tmp/s/s10
O=/tmp/c10d; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT 2>/dev/null)"
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='MlaTcOpTest.*' > $O/mla_test.log 2>&1; echo "mla test rc $? ($(grep -c '| PASS' $O/mla_test.log) PASS, $(grep -c '| FAIL' $O/mla_test.log) FAIL)"
grep -E "FAILED|^\[  PASSED" $O/mla_test.log | head -5
for r in 1 2; do
  for v in old new; do
    b=$P/bin/penstock_bench_kernels; [ $v = old ] && b=$P/bin/bench_main
    timeout 90 $b --only mla > $O/mla_bench.$v.$r.jsonl 2>$O/mla_bench.$v.$r.err; echo "mla bench $v $r rc $?"
  done
done
python3 - $O <<'PY'
import json,glob,sys,collections
rows=collections.defaultdict(dict)
for f in sorted(glob.glob(sys.argv[1]+'/mla_bench.*.jsonl')):
    tag='.'.join(f.split('/')[-1].split('.')[1:3])
    for l in open(f):
        if not l.startswith('{'): continue
        r=json.loads(l)
        key=(r.get('bench'), r.get('kernel'), r.get('heads'), r.get('prefix'), r.get('tokens'))
        rows[key][tag]=r.get('tflops', r.get('tflops_model'))
for k,v in rows.items(): print(k, {t: (round(x,1) if isinstance(x,(int,float)) else x) for t,x in sorted(v.items())})
PY
for r in 1 2; do
  for v in old new; do
    b=$P/bin/penstock_model_bench; [ $v = old ] && b=$P/bin/mb_old
    timeout 80 $b --config $P/configs/deepseek-v3.json --model-name dsv3n.$v --layers 3:4 --tokens 16384 --reps 5 --fp8-weights native --breakdown --json $O/dsv3n.$v.$r.json > $O/dsv3n.$v.$r.log 2>&1; echo "dsv3n $v $r rc $?"
    timeout 80 $b --config $P/configs/glm-5.3.json --model-name glmn.$v --layers 6:7 --tokens 16384 --reps 5 --dsa-fp8-indexer --fp8-weights native --breakdown --json $O/glmn.$v.$r.json > $O/glmn.$v.$r.log 2>&1; echo "glmn $v $r rc $?"
  done
done
python3 - $O <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*n.*.json')):
    r=json.load(open(f))[0]; b={x['scope']:x['median_ms'] for x in r['breakdown']}
    aq=sum(v for k,v in b.items() if k.endswith('act_quant'))
    print(f.split('/')[-1], 'median', round(r['median_ms'],2), 'min', round(r['min_ms'],2), 'act_quant total', round(aq,2), {k.split('.',1)[1]:round(v,2) for k,v in b.items() if k.endswith('act_quant')})
PY
tar -C /tmp -cJf $OUT/c10d.tar.xz c10d
