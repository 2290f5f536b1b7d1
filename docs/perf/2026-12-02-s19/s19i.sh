#!/usr/bin/env bash
# Session 19, call I (not run: no device time left; for the next session): build branch wip/mix-v4-store (2aa7ece),
# (or apply s19i-mix-v4-store.patch, the same change), pack with tools/pack_kernel_bins.sh into build-dev-lead/s19i. The ws attn_res_mix kernel with 16-byte output stores: the KDA op tests, memcheck, and the
# elementwise bench with the two-pass kernel (PENSTOCK_MEMBW_BASELINE=1) alternating.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s19i.tar.xz -C /tmp/s
P=/tmp/s/s19i; O=$OUT/s19i; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"
t=cuda_kernels_test
timeout 60 $P/bin/$t --gtest_filter='KdaBf16OpTest.*:KdaOpTest.*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -6; echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "OK \]|PASSED|FAILED|\[conf\].*attn_res" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
timeout 40 compute-sanitizer --tool memcheck $P/bin/$t --gtest_filter='KdaBf16OpTest.AttnResMix*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -3
B=$P/bin/penstock_bench_kernels
timeout 30 $B --only copy --warmup 5 --reps 30 > $O/bench_copy.jsonl 2>/dev/null
for r in 1 2; do for base in 1 0; do
  PENSTOCK_MEMBW_BASELINE=$base timeout 30 $B --only elementwise --warmup 5 --reps 30 > $O/elem.base$base.r$r.jsonl 2>/dev/null
done; done
python3 - <<PY
import json, glob
cp = [json.loads(l) for l in open('$O/bench_copy.jsonl') if l.startswith('{')]
ceil = max(r.get('gbps', 0) for r in cp if r.get('bench') == 'copy_d2d')
print(f'  copy ceiling {ceil:.0f} GB/s')
for f in sorted(glob.glob('$O/elem.*.jsonl')):
    for l in open(f):
        if not l.startswith('{'): continue
        r = json.loads(l)
        if r.get('bench', '').startswith('attn_res_mix'):
            print(' ', f.split('/')[-1], r.get('bank_rows'), round(r.get('time_us', 0), 1), 'us', round(r.get('gbps', 0)), 'GB/s', f"{100 * r.get('gbps', 0) / ceil:.1f}%")
PY
cat $O/elem.*.jsonl > $O/bench_elem.jsonl; rm $O/elem.*.jsonl
