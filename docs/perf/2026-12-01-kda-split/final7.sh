#!/usr/bin/env bash
# session 7 final call: KDA conformance (+ helper's memory-bound filters), op bench + fla same run, K3 KDA layer A/B
# (split vs fused), K3 layers with torch compositions.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/sess.tar.xz -C /tmp/s
PKG=/tmp/s/sess
O=/tmp/o; mkdir -p $O
export LD_LIBRARY_PATH="${PKG}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
{
echo "commit $(cat ${PKG}/COMMIT) tree $(git rev-parse --short=12 HEAD 2>/dev/null)"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
echo "+ conformance $(date -u +%T)"
timeout 150 ${PKG}/bin/cuda_kernels_test --gtest_filter="${FILTER:-KdaOpTest.*:KdaBf16OpTest.*:DataMovementOpTest.*:ElementwiseOpTest.*}" > $O/conf.log 2>&1
echo "conf rc $? ($(grep -c '| PASS' $O/conf.log) PASS, $(grep -c '| FAIL' $O/conf.log) FAIL)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran" $O/conf.log | head
echo "+ kda bench $(date -u +%T)"
timeout 120 ${PKG}/bin/penstock_bench_kernels --only kda --reps 5 > $O/penstock_kda.jsonl 2>$O/bench.err; echo "bench rc $?"
PENSTOCK_KDA_TC_PROFILE=1 timeout 60 ${PKG}/bin/penstock_bench_kernels --only kda --reps 1 --warmup 0 2>&1 >/dev/null | grep "profile" | grep split > $O/profile.txt
cat $O/profile.txt
python3 - $O/penstock_kda.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r=json.loads(l)
        print(f"{r['variant']:>24} T {r['tokens']:>6}: {r['ms']:9.3f} ms {r['tflops_chunk_model']:6.1f} TFLOP/s diff {r.get('max_abs_diff_vs_recurrent_16rows','-')}")
PY
echo "+ fla $(date -u +%T)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site ${PKG}/whl/*.whl >/dev/null 2>&1
PYTHONPATH=/tmp/fla-site timeout 200 python3 tools/fla_kda_baseline.py > $O/fla_kda.jsonl 2>$O/fla_kda.err; echo "fla rc $?"
python3 - $O/fla_kda.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r=json.loads(l); print(f"fla {r['case']:>15} T {r['tokens']:>6}: {r.get('ms', float('nan')):9.3f} ms")
PY
echo "+ layer A/B $(date -u +%T)"
PKG=$PKG OUT=$O/ab MODES="default PENSTOCK_KDA_DELTA_FORM=fused" LAYERS="k3kda" ROUNDS=2 REPS=5 RUN_TIMEOUT=60 timeout 200 bash ${PKG}/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
python3 - $O/ab <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*.json')):
    r=json.load(open(f))[0]; b={x['scope']:x['median_ms'] for x in r['breakdown']}
    print(f.split('/')[-1], f"{r['median_ms']:.2f}", 'recurrence', f"{b.get('layer.kda.recurrence',0):.2f}", 'conv', f"{b.get('layer.kda.conv',0):.2f}")
PY
echo "+ layers + torch $(date -u +%T)"
PKG=$PKG OUT=$O/sc FILTER=none BENCHES="${BENCHES:-k3kda k3mla}" TORCH_MODELS="${TORCH_MODELS:-kimi-k3-mla}" REPS=10 TORCH_TIMEOUT=130 TORCH_TIMEOUT_KDA=${TKDA:-150} \
  timeout 230 bash ${PKG}/tools/session_gpu_check.sh 2>&1 | tail -12
echo "+ end $(date -u +%T)"
} 2>&1 | tee $O/final.log
mkdir -p $O/sc; cp /tmp/clocks.log $O/ 2>/dev/null
tar czf $OUT/final.tgz -C /tmp o; cp $O/final.log $O/penstock_kda.jsonl $O/fla_kda.jsonl $OUT/
