#!/usr/bin/env bash
# Session 10, call C: the fused gated grouped GEMM (bit-exact test; Kimi K3 KDA / MLA layers fused vs
# PENSTOCK_GROUPED_GLU=unfused, interleaved), the attention bench with FP8 at DeepSeek-V3's 16K, FP8 attention tests.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s10.tar.xz -C /tmp/s; P=/tmp/s/s10
O=/tmp/c10c; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT 2>/dev/null)"
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='GroupedGemmDeviceTest.*:ElementwiseOpTest.*Silu*:*Situ*' > $O/glu_test.log 2>&1; echo "glu test rc $? ($(grep -c '| PASS' $O/glu_test.log) PASS, $(grep -c '| FAIL' $O/glu_test.log) FAIL)"
grep -E "grouped_gemm_glu|FAILED|^\[  PASSED" $O/glu_test.log | head -12
timeout 100 $P/bin/cuda_attention_cudnn_test > $O/attn_test.log 2>&1; echo "attn test rc $? ($(grep -c '| PASS' $O/attn_test.log) PASS, $(grep -c '| FAIL' $O/attn_test.log) FAIL)"
PKG=$P OUT=$O/ab MODES="default PENSTOCK_GROUPED_GLU=unfused" LAYERS="k3kda k3mla" ROUNDS=2 REPS=5 RUN_TIMEOUT=60 timeout 280 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
python3 - $O/ab <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*.json')):
    r=json.load(open(f))[0]; b={x['scope']:x['median_ms'] for x in r['breakdown']}
    print(f.split('/')[-1], {k.split('layer.moe.experts.')[-1]:round(v,2) for k,v in b.items() if k.startswith('layer.moe.experts.')})
PY
timeout 150 $P/bin/penstock_bench_kernels --only attention > $O/attn_bench.jsonl 2> $O/attn_bench.err; echo "bench rc $?"
python3 - $O/attn_bench.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r=json.loads(l); print(f"{r['shape']:>22} S {r['seq']:>6} {r['impl']:>22}: {r['time_ms']:8.3f} ms {r['tflops']:6.1f} TFLOP/s", ('quant %.3f ms' % r['quantize_qkv_ms']) if 'quantize_qkv_ms' in r else '')
PY
tar -C /tmp -cJf $OUT/c10c.tar.xz c10c
