#!/usr/bin/env bash
# Session 15, call E (lane groups per row, the hardware e4m3x2 cast in fp8_quantize_heads): cuda_attention_cudnn_test,
# the quantisers one by one (penstock_bench_kernels --only attention, "fp8_quantize" records), then the interleaved
# A/B of the FP8-attention layers against call A's model bench (bin/penstock_model_bench_s15a).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s15e.tar.xz -C /tmp/s
P=/tmp/s/s15e; O=/tmp/s15e; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_attention_cudnn_test
timeout 150 $P/bin/$t > $O/$t.log 2>&1; echo "$t rc $?"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -5
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
timeout 120 $P/bin/penstock_bench_kernels --only attention > $O/attn_bench.jsonl 2> $O/attn_bench.err; echo "bench rc $?"
grep '"fp8_quantize"' $O/attn_bench.jsonl | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r['shape'], r['seq'], {k: round(v,3) for k,v in r.items() if k.endswith('_ms')})"
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench_s15a default" LAYERS="dsv3na k3mlana" REPS=8 ROUNDS=2 RUN_TIMEOUT=60 \
  timeout 120 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s15e.tar.xz s15e
