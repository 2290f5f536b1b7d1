#!/usr/bin/env bash
# Session 19, call A: the whole cuda_kernels_test on the session's code (ClusterLaunch, the shared-memory
# attn_res_mix kernel), the FP8 pair kernel forced on Fp8TmaTest, the elementwise bench with the two-pass attn_res_mix
# (PENSTOCK_MEMBW_BASELINE=1) and the new one alternating, the copy ceiling, then an interleaved layer A/B of the FP8
# grouped GEMM's pairs (PENSTOCK_FP8_PAIR=1) against the default below 384 rows per expert (4K; K3 at 16K).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s19a.tar.xz -C /tmp/s
P=/tmp/s/s19a; O=$OUT/s19a; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_kernels_test
timeout 260 $P/bin/$t --gtest_filter='*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -12
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "\[conf\].*FAIL" $O/$t.log | head -5
PENSTOCK_FP8_PAIR=1 timeout 60 $P/bin/$t --gtest_filter='Fp8TmaTest.*' > $O/$t.pair.log 2>&1; echo "$t (FP8 pairs forced) rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.pair.log | head -6
grep -E "OK \]|PASSED|FAILED|\[conf\]" $O/$t.log > $O/$t.conf.log; grep -E "OK \]|PASSED|FAILED" $O/$t.pair.log > $O/$t.pair.conf.log; rm $O/$t.log $O/$t.pair.log
B=$P/bin/penstock_bench_kernels
timeout 60 $B --only copy --warmup 5 --reps 30 > $O/bench_copy.jsonl 2>/dev/null; echo "copy rc $? at ${SECONDS}s"
for r in 1 2; do for base in 1 0; do
  PENSTOCK_MEMBW_BASELINE=$base timeout 90 $B --only elementwise --warmup 5 --reps 30 > $O/bench_elem.base$base.r$r.jsonl 2>/dev/null
  echo "elementwise baseline=$base round $r rc $? at ${SECONDS}s"
done; done
python3 - <<PY
import json, glob
cp = [json.loads(l) for l in open('$O/bench_copy.jsonl') if l.startswith('{')]
ceil = max(r.get('gbps', 0) for r in cp if r.get('bench') == 'copy_d2d')
print(f'  copy ceiling {ceil:.0f} GB/s')
for f in sorted(glob.glob('$O/bench_elem.*.jsonl')):
    for l in open(f):
        if not l.startswith('{'): continue
        r = json.loads(l)
        if r.get('bench', '').startswith('attn_res_mix'):
            print(' ', f.split('/')[-1], r.get('bank_rows'), round(r.get('time_us', 0), 1), 'us', round(r.get('gbps', 0)), 'GB/s', f"{100 * r.get('gbps', 0) / ceil:.1f}%")
PY
left=$((575 - SECONDS)); [ $left -gt 250 ] && left=250
PKG=$P OUT=/tmp/ab4 MODES="default PENSTOCK_FP8_PAIR=1" LAYERS="dsv3na glmn k3mlan" T=4096 REPS=30 ROUNDS=2 RUN_TIMEOUT=30 \
  timeout $left bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat /tmp/ab4/ab.log | tee $O/ab4.log
left=$((580 - SECONDS))
[ $left -gt 60 ] && PKG=$P OUT=/tmp/ab16 MODES="default PENSTOCK_FP8_PAIR=1" LAYERS="k3mlan" T=16384 REPS=12 ROUNDS=2 RUN_TIMEOUT=40 \
  timeout $left bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat /tmp/ab16/ab.log 2>/dev/null | tee $O/ab16.log
tar -C /tmp -cJf $O/ab.tar.xz ab4 ab16 2>/dev/null
