#!/usr/bin/env bash
# Session 12, call A: the fused residual add + RMSNorm + FP8 rows. cuda_kernels_test (all; the fused norm's byte-for-byte
# test among them), cuda_runtime_test, the norm bench (fused vs add + rms_norm + fp8_act_quant), and the DeepSeek-V3 /
# GLM-5.3 layers at 16K, session 11's build (df58465) vs this one, interleaved.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s11mb.tar.xz -C /tmp/s && tar -xJf build-dev-lead/s12.tar.xz -C /tmp/s
P=/tmp/s/s12; cp /tmp/s/s11mb/bin/penstock_model_bench $P/bin/penstock_model_bench.s11
O=/tmp/s12a; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/gpu.txt
timeout 240 $P/bin/cuda_kernels_test > $O/kernels_test.log 2>&1; echo "kernels rc $?"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/kernels_test.log | head
grep -c "\[conf\].*PASS" $O/kernels_test.log; grep -c "\[conf\].*FAIL" $O/kernels_test.log
[ -x $P/bin/cuda_runtime_test ] && { timeout 120 $P/bin/cuda_runtime_test > $O/runtime_test.log 2>&1; echo "runtime rc $?"; tail -3 $O/runtime_test.log; }
timeout 90 $P/bin/penstock_bench_kernels --only rms_norm > $O/norm_bench.jsonl 2>/dev/null; echo "bench rc $?"
python3 - $O/norm_bench.jsonl <<'PY' | tee $O/norm_bench.txt
import json,sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r=json.loads(l)
    if r.get('bench')=='add_rms_norm_fp8' or (r.get('bench')=='rms_norm' and r.get('variant')=='auto' and r.get('dtype')=='bf16' and r.get('n_rows')==16384):
        print(r.get('bench'), r.get('variant'), r.get('n_rows'), r.get('dim'), f"{r.get('time_us',0):.1f} us", f"{r.get('gbps',r.get('GB/s',0))}")
PY
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench.s11 default" LAYERS="dsv3n glmn dsv3" REPS=8 ROUNDS=4 RUN_TIMEOUT=60 timeout 300 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s12a.tar.xz s12a
