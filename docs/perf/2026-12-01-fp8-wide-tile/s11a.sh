#!/usr/bin/env bash
# Session 11, call A: FP8 GEMM conformance (wide tile, fused gated epilogue), the FP8 GEMM bench + torch baseline,
# then the native-FP8 layer A/B (DeepSeek-V3, GLM-5.3) over {wide+fused, wide+unfused, 128+unfused}.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s11.tar.xz -C /tmp/s; P=/tmp/s/s11
O=/tmp/s11a; mkdir -p $O/offsets
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
export PYTHONUNBUFFERED=1
echo "commit $(cat $P/COMMIT) $(date -u +%T)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
timeout 170 $P/bin/cuda_kernels_test --gtest_filter='Fp8*' > $O/fp8_test.log 2>&1; echo "fp8 tests rc $?"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|glu |tail-heavy" $O/fp8_test.log | head -30
echo "+ bench $(date -u +%T)"
PENSTOCK_FP8_OFFSETS_DIR=$O/offsets timeout 150 $P/bin/penstock_bench_kernels --only fp8 > $O/fp8_bench.jsonl 2>&1; echo "bench rc $?"
echo "+ torch $(date -u +%T)"
timeout 100 python3 tools/fp8_gemm_baseline.py $O/offsets > $O/fp8_torch.jsonl 2>&1; echo "torch rc $?"
python3 - $O/fp8_bench.jsonl $O/fp8_torch.jsonl <<'PY'
import json, sys
for path in sys.argv[1:]:
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"): continue
        try: r = json.loads(line)
        except ValueError: continue
        if "bench" not in r or r["bench"] == "fp8_act_quant": continue
        v = r.get("variant", ""); tf = r.get("tflops")
        print(f"{r['bench'][:12]:12s} {r.get('shape','')[:22]:22s} T{r.get('tokens')} {v[:26]:26s} " + (f"{tf:7.1f}" if tf else "   -   ") + f" {r.get('median_us', r.get('time_us', 0)):9.1f}us {str(r.get('speedup_vs_unfused',''))[:5]} {r.get('error','')[:50]}")
PY
echo "+ layers $(date -u +%T)"
PKG=$P OUT=$O/ab MODES="default PENSTOCK_GROUPED_GLU=unfused PENSTOCK_FP8_TILE_N=128,PENSTOCK_GROUPED_GLU=unfused" LAYERS="dsv3n glmn" REPS=5 ROUNDS=2 RUN_TIMEOUT=60 timeout 230 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
echo "+ end $(date -u +%T)"
rm -rf $O/offsets
tar -C /tmp -cJf $OUT/s11a.tar.xz s11a
