#!/usr/bin/env bash
# Session 16, call B: loads batched ahead of their uses in fp8_quantize_heads (and its bf16 packs kept as words) and in
# the DSA indexer's prologue (gates, the f16 kernel's q). Conformance (Fp8AttentionTest.*, DsaOpTest.*), the
# quantisers (penstock_bench_kernels --only attention, fp8_quantize records), the indexer bench new vs session 15's
# call E binary, then the interleaved layer A/B (dsv3na, k3mlana, glmn) against call E.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s16b.tar.xz -C /tmp/s
P=/tmp/s/s16b; O=/tmp/s16b; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
run_test() {  # binary filter
  timeout 110 $P/bin/$1 --gtest_filter="$2" > $O/$1.log 2>&1; echo "$1 rc $? at ${SECONDS}s"
  grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$1.log | head -8
  echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$1.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$1.log)"
  grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$1.log > $O/$1.conf.log; rm $O/$1.log
}
run_test cuda_attention_cudnn_test 'Fp8AttentionTest.*'
run_test cuda_kernels_test 'DsaOpTest.*:QuantizeE4m3Test.*:-DsaOpTest.Perf'
timeout 80 $P/bin/penstock_bench_kernels --only attention > $O/attn.jsonl 2> $O/attn.err; echo "attention bench rc $? at ${SECONDS}s"
python3 -c "
import json
for l in open('$O/attn.jsonl'):
    l=l.strip()
    if not l.startswith('{'): continue
    r=json.loads(l)
    if r.get('bench')=='fp8_quantize': print(' ', r['shape'], r['seq'], {k: round(v,3) for k,v in r.items() if k.endswith('_ms')})
"
for b in penstock_bench_kernels_s15e penstock_bench_kernels penstock_bench_kernels_s15e penstock_bench_kernels; do
  [ $SECONDS -gt 300 ] && { echo "dsa bench $b skipped at ${SECONDS}s"; continue; }
  timeout 70 $P/bin/$b --only dsa > $O/dsa_$b.$SECONDS.jsonl 2> /dev/null; echo "dsa bench $b rc $? at ${SECONDS}s"
done
for f in $O/dsa_*.jsonl; do echo "$f"; python3 -c "
import json
for l in open('$f'):
    l=l.strip()
    if not l.startswith('{'): continue
    r=json.loads(l)
    print(' ', r.get('impl'), r.get('seq', r.get('tokens')), round(r.get('time_us',0)/1000,3), 'ms', round(r.get('tflops',0)), 'TFLOP/s')
" | grep -i "wgmma\|topk" | head -12; done
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench_s15e default" LAYERS="dsv3na k3mlana glmn" REPS=8 ROUNDS=2 RUN_TIMEOUT=60 \
  timeout 180 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s16b.tar.xz s16b
