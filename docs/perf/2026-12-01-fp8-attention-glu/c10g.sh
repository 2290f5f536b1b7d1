#!/usr/bin/env bash
# Session 10, call G: after the refactor of the FP8 quantiser kernels and models/mla.cc's FP8 call: the FP8 attention
# tests and the DeepSeek-V3 layer with --fp8-attention.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s10.tar.xz -C /tmp/s; P=/tmp/s/s10
O=/tmp/c10g; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
timeout 120 $P/bin/cuda_attention_cudnn_test > $O/attn_test.log 2>&1; echo "attn test rc $? ($(grep -c '| PASS' $O/attn_test.log) PASS, $(grep -c '| FAIL' $O/attn_test.log) FAIL)"
grep -E "^\[  PASSED|FAILED" $O/attn_test.log | head -4
timeout 80 $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --model-name dsv3.fp8attn --layers 3:4 --tokens 16384 --reps 5 --fp8-weights dequant --fp8-attention --breakdown --json $O/dsv3.json > $O/dsv3.log 2>&1; echo "dsv3 rc $?"
python3 -c "
import json; r=json.load(open('$O/dsv3.json'))[0]; b={x['scope']:x['median_ms'] for x in r['breakdown']}
print(round(r['median_ms'],2), {k:round(v,2) for k,v in b.items() if 'core.' in k})"
tar -C /tmp -cJf $OUT/c10g.tar.xz c10g
