#!/usr/bin/env bash
# Session 13, call A: Penstock's FP8 wgmma attention. cuda_attention_cudnn_test (the FP8 attention tests, the new
# kernel's cases among them) and penstock_bench_kernels --only attention (the FP8 kernel vs cuDNN's FP8 SDPA and
# bf16 SDPA, same run).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s13a.tar.xz -C /tmp/s
P=/tmp/s/s13a
O=/tmp/s13a; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/gpu.txt
timeout 200 $P/bin/cuda_attention_cudnn_test > $O/attn_test.log 2>&1; echo "attn test rc $?"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/attn_test.log | head
echo "conf PASS $(grep -c '\[conf\].*PASS' $O/attn_test.log) FAIL $(grep -c '\[conf\].*FAIL' $O/attn_test.log)"
grep "\[conf\].*FAIL" $O/attn_test.log | head -20
grep "attention_fp8_wgmma.*relative RMS" $O/attn_test.log | head -40
timeout 200 $P/bin/penstock_bench_kernels --only attention > $O/attn_bench.jsonl 2>$O/attn_bench.err; echo "bench rc $?"
python3 - $O/attn_bench.jsonl <<'PY' | tee $O/attn_bench.txt
import json,sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r=json.loads(l)
    print(r.get('shape'), r.get('seq'), r.get('impl'), f"{r.get('time_ms',0):.3f} ms", f"{r.get('tflops',0):.0f} TFLOP/s", r.get('quantize_qkv_ms',''))
PY
tail -5 $O/attn_bench.err
tar -C /tmp -cJf $OUT/s13a.tar.xz s13a
