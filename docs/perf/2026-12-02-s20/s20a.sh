#!/usr/bin/env bash
# Session 20, call A: the whole cuda_kernels_test on the session's first kernel commit (session 19's review pass, the
# attn_res_mix ws kernel's 16-byte stores, fp8_act_quant's 16-column mapping, DivU32), memcheck on both changed
# kernels, and same-run A/Bs against PENSTOCK_MEMBW_BASELINE=1 (two-pass attn_res_mix; 8-column fp8_act_quant),
# alternating, two rounds each.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s20a.tar.xz -C /tmp/s
P=/tmp/s/s20a; O=$OUT/s20a; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t=cuda_kernels_test
timeout 280 $P/bin/$t --gtest_filter='*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -12
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "\[conf\].*FAIL" $O/$t.log | head -5
grep -E "OK \]|PASSED|FAILED|\[conf\]|\[fp8\]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
timeout 90 compute-sanitizer --tool memcheck $P/bin/$t --gtest_filter='KdaBf16OpTest.AttnResMix*:Fp8Test.ActQuant*' > $O/memcheck.log 2>&1; echo "memcheck rc $? at ${SECONDS}s"
grep -E "ERROR SUMMARY|PASSED|FAILED" $O/memcheck.log | head -4; rm $O/memcheck.log
B=$P/bin/penstock_bench_kernels
for r in 1 2; do for base in 1 0; do
  PENSTOCK_MEMBW_BASELINE=$base timeout 60 $B --only elementwise --warmup 5 --reps 30 > $O/elem.base$base.r$r.jsonl 2>/dev/null
  PENSTOCK_MEMBW_BASELINE=$base timeout 60 $B --only fp8_quant --warmup 5 --reps 30 > $O/aq.base$base.r$r.jsonl 2>/dev/null
done; done
echo "benches done at ${SECONDS}s"
python3 - <<PY
import json, glob
def rows(f): return [json.loads(l) for l in open(f) if l.startswith('{')]
for f in sorted(glob.glob('$O/elem.*.jsonl')) + sorted(glob.glob('$O/aq.*.jsonl')):
    rs = rows(f)
    ceil = max(r.get('gbps', 0) for r in rs if r.get('bench') == 'copy_d2d')
    for r in rs:
        b = r.get('bench', '')
        if b.startswith('attn_res_mix'):
            print(' ', f.split('/')[-1], 'mix rows', r.get('bank_rows'), round(r.get('time_us', 0), 1), 'us', f"{100 * r.get('gbps', 0) / ceil:.1f}% of {ceil:.0f}")
        if b == 'fp8_act_quant':
            print(' ', f.split('/')[-1], 'T', r.get('rows'), 'k', r.get('k'), round(r.get('time_us', 0), 1), 'us', round(r.get('gbps', 0)), 'GB/s', f"{100 * r.get('gbps', 0) / ceil:.1f}% of {ceil:.0f}")
PY
cat $O/elem.*.jsonl > $O/bench_elem.jsonl; cat $O/aq.*.jsonl > $O/bench_aq.jsonl; rm $O/elem.*.jsonl $O/aq.*.jsonl
# short_conv with the fused q/k L2 norm: this commit (the batch's norm sums reduced as interleaved chains) against
# session 19's binary (s19g, 474a9f9: one chain per token), alternating, KdaOpTest.Perf (T 8192 x 36864 channels).
mkdir -p /tmp/s && tar -xJf build-dev-lead/s19g.tar.xz -C /tmp/s
for r in 1 2; do for b in s19g s20a; do
  LD_LIBRARY_PATH=/tmp/s/$b/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu PENSTOCK_CUDA_PERF=1 timeout 60 \
    /tmp/s/$b/bin/cuda_kernels_test --gtest_filter='KdaOpTest.Perf' 2>&1 | grep -E "\[perf\].*short_conv" | sed "s/^/  $b r$r /"
done; done
echo "done at ${SECONDS}s"
