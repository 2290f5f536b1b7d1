#!/usr/bin/env bash
# Session 10, call A: FP8 attention tests (cuda_attention_cudnn_test) and the DeepSeek-V3 / Kimi K3 MLA layers at 16K
# with and without --fp8-attention (interleaved rounds), bf16 (dequant) and native FP8 weights.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s10.tar.xz -C /tmp/s; P=/tmp/s/s10
O=/tmp/c10a; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/machine.txt; cat $O/machine.txt
echo "commit $(cat $P/COMMIT 2>/dev/null)"
(while true; do nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader >> $O/clocks.log; sleep 0.5; done) & CLK=$!
timeout 240 $P/bin/cuda_attention_cudnn_test > $O/attn_test.log 2>&1; echo "attn test rc $? ($(grep -c '| PASS' $O/attn_test.log) PASS, $(grep -c '| FAIL' $O/attn_test.log) FAIL)"
grep -E "FAILED|cudnn (taken|declined)|relative RMS|^\[  PASSED" $O/attn_test.log | head -30
grep -E "FAIL" $O/attn_test.log | head -10
for round in 1 2; do
  for fa in off on; do
    extra=""; [ $fa = on ] && extra="--fp8-attention"
    timeout 150 $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --model-name dsv3.$fa --layers 3:4 --tokens 16384 --reps 5 --fp8-weights dequant,native $extra --breakdown --json $O/dsv3.$fa.$round.json > $O/dsv3.$fa.$round.log 2>&1
    echo "dsv3 $fa round $round rc $?"
  done
done
for fa in off on; do
  extra=""; [ $fa = on ] && extra="--fp8-attention"
  timeout 120 $P/bin/penstock_model_bench --config $P/configs/kimi-k3.json --model-name k3mla.$fa --layers 3:4 --tokens 16384 --reps 5 $extra --breakdown --json $O/k3mla.$fa.json > $O/k3mla.$fa.log 2>&1
  echo "k3mla $fa rc $?"
done
kill $CLK 2>/dev/null
python3 - $O <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*.json')):
    for r in json.load(open(f)):
        bd={x['scope']:x['median_ms'] for x in r.get('breakdown',[])}
        keys=[k for k in bd if k.endswith(('core.attention','core.fp8_quant','core.fp8_dequant','core.kv_expand','attn.o_proj'))]
        print(f.split('/')[-1], r.get('fp8_weights'), 'median', round(r['median_ms'],2), 'min', round(r['min_ms'],2), {k.split('.')[-1]:round(bd[k],2) for k in keys})
PY
tar -C /tmp -cJf $OUT/c10a.tar.xz c10a
