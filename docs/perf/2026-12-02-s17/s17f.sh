#!/usr/bin/env bash
# Session 17, call F: why the CTA-pair FP8 grouped GEMM ran at 0.5-0.7x (call E): the occupancy API's cluster count
# (PENSTOCK_FP8_PAIR_DEBUG) and a grid of sms / 2 pairs instead (PENSTOCK_FP8_PAIR_GRID=sms), then the layers.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s17f.tar.xz -C /tmp/s
P=/tmp/s/s17f; O=/tmp/s17f; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
show() {
python3 - "$1" <<'PY'
import json,sys
for l in open(sys.argv[1]):
    try: r=json.loads(l)
    except Exception: continue
    if r.get('bench')!='fp8_grouped_gemm' and not (r.get('bench')=='fp8_gemm' and r.get('shape','').startswith(('o ','q_b'))): continue
    print(' ', r['bench'], r.get('shape'), r.get('tokens'), r.get('variant'), round(r.get('tflops',0)))
PY
}
for g in occupancy sms; do
  PENSTOCK_FP8_PAIR_DEBUG=1 PENSTOCK_FP8_PAIR_GRID=$g PENSTOCK_FP8_PAIR=1 timeout 120 $P/bin/penstock_bench_kernels --only fp8 > $O/fp8.$g.jsonl 2>$O/fp8.$g.err
  echo "grid $g rc $? at ${SECONDS}s"; grep "fp8 pair" $O/fp8.$g.err | sort | uniq -c | head -4; show $O/fp8.$g.jsonl
done
left=$((560 - SECONDS)); [ $left -gt 100 ] && left=100
PKG=$P OUT=$O/ab MODES="PENSTOCK_FP8_PAIR=0 PENSTOCK_FP8_PAIR=1,PENSTOCK_FP8_PAIR_GRID=sms" LAYERS="dsv3na glmn" REPS=16 ROUNDS=2 \
  RUN_TIMEOUT=40 timeout $left bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s17f.tar.xz s17f
