#!/usr/bin/env bash
# Session 20, call C (the session's final kernel code): the whole cuda_kernels_test; the FP8 attention tests (their
# composed path runs fp8_act_quant's new 16-column kernel, bit for bit against the attention's own FP8 rows);
# memcheck on the changed kernels; KdaOpTest.Perf and the rms_norm bench (the fused norm + FP8 quantisation runs
# act_quant_group, whose divide-or-reciprocal branch is now taken once per group) against session 19's binary
# (s19g, 474a9f9), alternating.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s20c.tar.xz -C /tmp/s && tar -xJf build-dev-lead/s19g.tar.xz -C /tmp/s
P=/tmp/s/s20c; O=$OUT/s20c; mkdir -p $O
L="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:$L
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# (As run, the loop below lacked `set -f`: the `*` filter expanded to file names and cuda_kernels_test did not run
# (rc 125); call C2, s20c2.sh, ran it on the same binary right after.)
set -f
for spec in "cuda_kernels_test * 280" "cuda_attention_cudnn_test Fp8AttentionTest.* 150"; do
  set -- $spec; t=$1
  timeout $3 $P/bin/$t --gtest_filter="$2" > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
  grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -8
  echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
  grep -E "\[conf\].*FAIL" $O/$t.log | head -5
  grep -E "OK \]|PASSED|FAILED|\[conf\]|\[fp8\]|Failure|Which is|differ" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
done
set +f
timeout 120 compute-sanitizer --tool memcheck $P/bin/cuda_kernels_test \
  --gtest_filter='KdaOpTest.ShortConv*:KdaOpTest.L2Norm*:Fp8Test.ActQuant*:KdaBf16OpTest.AttnResMix*' > $O/memcheck.log 2>&1
echo "memcheck rc $? at ${SECONDS}s"; grep -E "ERROR SUMMARY|PASSED|FAILED" $O/memcheck.log | head -4; rm $O/memcheck.log
for r in 1 2; do for b in s19g s20c; do
  LD_LIBRARY_PATH=/tmp/s/$b/lib:$L PENSTOCK_CUDA_PERF=1 timeout 60 /tmp/s/$b/bin/cuda_kernels_test \
    --gtest_filter='KdaOpTest.Perf' 2>&1 | grep -E "\[perf\]" | grep -E "short_conv|l2norm" | sed "s/^/  $b r$r /"
  LD_LIBRARY_PATH=/tmp/s/$b/lib:$L timeout 60 /tmp/s/$b/bin/penstock_bench_kernels --only rms_norm --warmup 5 --reps 30 \
    > $O/rms.$b.r$r.jsonl 2>/dev/null
done; done
echo "benches done at ${SECONDS}s"
python3 - <<PY
import json, glob
for f in sorted(glob.glob('$O/rms.*.jsonl')):
    for l in open(f):
        if not l.startswith('{'): continue
        r = json.loads(l)
        if r.get('bench') == 'add_rms_norm_fp8':
            print(' ', f.split('/')[-1], r.get('n_rows'), r.get('dim'), r.get('variant'), round(r.get('time_us', 0), 1), 'us', round(r.get('gbps', 0)), 'GB/s')
PY
cat $O/rms.*.jsonl > $O/bench_rms.jsonl; rm $O/rms.*.jsonl
