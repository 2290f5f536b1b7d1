#!/usr/bin/env bash
# Session 13, call F: fewer ALU operations per tile (descriptors per tile, one-word e4m3 pack, tree max); the layers with bf16 weights, FP8 weights and FP8 weights + FP8 attention.
# cuda_attention_cudnn_test, penstock_bench_kernels --only attention, and DeepSeek-V3 / Kimi K3 MLA layers at 16K with
# native FP8 weights, bf16 attention (cuDNN) vs --fp8-attention, interleaved, with and without ping-pong.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s13f.tar.xz -C /tmp/s
P=/tmp/s/s13f
O=/tmp/s13f; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/gpu.txt
timeout 200 $P/bin/cuda_attention_cudnn_test > $O/attn_test.log 2>&1; echo "attn test rc $?"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/attn_test.log | head
echo "conf PASS $(grep -c '\[conf\].*PASS' $O/attn_test.log) FAIL $(grep -c '\[conf\].*FAIL' $O/attn_test.log)"
grep "\[conf\].*FAIL" $O/attn_test.log | head -20
grep "attention_fp8_wgmma.*relative RMS" $O/attn_test.log | awk -F'|' '{print $2, $3}' | sort -t' ' -k1 | head -40
timeout 200 $P/bin/penstock_bench_kernels --only attention > $O/attn_bench.jsonl 2>$O/attn_bench.err; echo "bench rc $?"
python3 - $O/attn_bench.jsonl <<'PY' | tee $O/attn_bench.txt
import json,sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r=json.loads(l)
    if r.get('impl') in ('cuda_core','cudnn_sdpa_autotuned'): continue
    print(r.get('shape'), r.get('seq'), r.get('impl'), f"{r.get('time_ms',0):.3f} ms", f"{r.get('tflops',0):.0f} TFLOP/s", r.get('quantize_qkv_ms',''))
PY
PKG=$P OUT=$O/ab MODES="default" LAYERS="dsv3 dsv3n dsv3na k3mla k3mlan k3mlana" REPS=5 ROUNDS=2 RUN_TIMEOUT=90 timeout 330 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s13f.tar.xz s13f
