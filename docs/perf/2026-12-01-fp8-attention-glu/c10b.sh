#!/usr/bin/env bash
# Session 10, call B: attention bench (bf16 cuDNN with / without lse, FP8 cuDNN heuristic / autotuned / no lse, fp8
# quantiser), FP8 attention tests, DeepSeek-V3 layer at 16K (lse-less one-round attention; FP8 attention on / off).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s10.tar.xz -C /tmp/s; P=/tmp/s/s10
O=/tmp/c10b; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/machine.txt
echo "commit $(cat $P/COMMIT 2>/dev/null)"
timeout 200 $P/bin/penstock_bench_kernels --only attention > $O/attn_bench.jsonl 2> $O/attn_bench.err; echo "bench rc $?"
python3 - $O/attn_bench.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r=json.loads(l); print(f"{r['shape']:>22} S {r['seq']:>6} {r['impl']:>22}: {r['time_ms']:8.3f} ms {r['tflops']:6.1f} TFLOP/s", ('quant %.3f ms' % r['quantize_qkv_ms']) if 'quantize_qkv_ms' in r else '')
PY
timeout 150 $P/bin/cuda_attention_cudnn_test > $O/attn_test.log 2>&1; echo "attn test rc $? ($(grep -c '| PASS' $O/attn_test.log) PASS, $(grep -c '| FAIL' $O/attn_test.log) FAIL)"
grep -E "FAIL|^\[  PASSED" $O/attn_test.log | head -10
for round in 1 2; do
  for fa in off on; do
    extra=""; [ $fa = on ] && extra="--fp8-attention"
    timeout 100 $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --model-name dsv3.$fa --layers 3:4 --tokens 16384 --reps 5 --fp8-weights dequant $extra --breakdown --json $O/dsv3.$fa.$round.json > $O/dsv3.$fa.$round.log 2>&1
    echo "dsv3 $fa round $round rc $?"
  done
done
python3 - $O <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/dsv3*.json')):
    for r in json.load(open(f)):
        bd={x['scope']:x['median_ms'] for x in r.get('breakdown',[])}
        keys=[k for k in bd if k.endswith(('core.attention','core.fp8_quant','core.fp8_dequant','core.kv_expand','attn.o_proj'))]
        print(f.split('/')[-1], r.get('fp8_weights'), 'median', round(r['median_ms'],2), 'min', round(r['min_ms'],2), {k.split('.')[-1]:round(bd[k],2) for k in keys})
PY
tar -C /tmp -cJf $OUT/c10b.tar.xz c10b
