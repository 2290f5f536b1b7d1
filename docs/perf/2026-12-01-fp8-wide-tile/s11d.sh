#!/usr/bin/env bash
# Session 11, call D: hardware e4m3 cast + shared MoE quantisation (conformance + bench GB/s), then the native-FP8 layers, new build vs
# call B's build (BIN=penstock_model_bench.s11b), interleaved.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s11.tar.xz -C /tmp/s; P=/tmp/s/s11
O=/tmp/s11d; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT) $(date -u +%T)"
timeout 170 $P/bin/cuda_kernels_test --gtest_filter='Fp8*:QuantizeE4m3*' > $O/fp8_test.log 2>&1; echo "fp8 tests rc $?"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|div_by|tie test|glu " $O/fp8_test.log | head -20
timeout 150 $P/bin/penstock_bench_kernels --only fp8 > $O/fp8_bench.jsonl 2>&1; echo "bench rc $?"
python3 - $O/fp8_bench.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"): continue
    r = json.loads(line)
    if r.get("bench") == "fp8_act_quant":
        print(f"actq {r.get('shape','')[:26]:26s} T{r.get('rows')} {r.get('time_us', 0):7.1f}us {r.get('gbps', 0):6.0f} GB/s")
    elif r.get("variant") in ("glu_fused", "glu_unfused", "wgmma_tma_wide") and r.get("bench") == "fp8_grouped_gemm":
        print(f"{r['variant']:16s} {r.get('shape','')[:22]:22s} T{r.get('tokens')} {r.get('tflops',0):7.1f} {r.get('time_us',0):9.1f}us")
PY
PKG=$P OUT=$O/ab MODES="default BIN=penstock_model_bench.s11b" LAYERS="dsv3n glmn" REPS=8 ROUNDS=4 RUN_TIMEOUT=60 timeout 200 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s11d.tar.xz s11d
