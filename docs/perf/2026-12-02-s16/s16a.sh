#!/usr/bin/env bash
# Session 16, call A: the k quantiser's grid with the head fastest + the FP8 attention kernel's scores one tile ahead.
# cuda_attention_cudnn_test and cuda_kernels_test (conformance), then penstock_bench_kernels --only attention, new and
# session 15's call E binary alternated twice, then the interleaved layer A/B (dsv3na, k3mlana) against call E.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s16a.tar.xz -C /tmp/s
P=/tmp/s/s16a; O=/tmp/s16a; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
for t in cuda_attention_cudnn_test cuda_kernels_test; do
  timeout 120 $P/bin/$t > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
  grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -8
  echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
  grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
done
summ() { python3 -c "
import json,sys
for l in open('$1'):
    r=json.loads(l)
    if r.get('bench')=='fp8_quantize': print(' ', r['shape'], r['seq'], {k: round(v,3) for k,v in r.items() if k.endswith('_ms')})
    elif 'tflops' in r and 'fp8' in r.get('impl',''): print(' ', r.get('shape'), r.get('seq'), r.get('impl'), round(r['time_us']/1000,3), 'ms', round(r['tflops']), 'TFLOP/s')
"; }
for round in 1 2; do
  [ $round = 2 ] && [ $SECONDS -gt 330 ] && { echo "round 2 skipped at ${SECONDS}s"; break; }
  for b in penstock_bench_kernels_s15e penstock_bench_kernels; do
    timeout 100 $P/bin/$b --only attention > $O/attn_${b}_$round.jsonl 2> $O/attn_${b}_$round.err; echo "$b round $round rc $?"
    summ $O/attn_${b}_$round.jsonl
  done
done
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench_s15e default" LAYERS="dsv3na k3mlana" REPS=8 ROUNDS=2 RUN_TIMEOUT=60 \
  timeout 130 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s16a.tar.xz s16a
