#!/usr/bin/env bash
# Session 20, call D (the session's last kernel commit: fp8_act_quant's two wide kernels share load_cols): the FP8,
# rms_norm, DivU32 and KDA op tests, memcheck on fp8_act_quant, and the fp8_act_quant bench against the 8-column
# kernel (PENSTOCK_MEMBW_BASELINE=1), alternating.
set -uo pipefail
set -f
mkdir -p /tmp/s && tar -xJf build-dev-lead/s20d.tar.xz -C /tmp/s
P=/tmp/s/s20d; O=$OUT/s20d; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"
t=cuda_kernels_test
timeout 150 $P/bin/$t --gtest_filter='Fp8*:RmsNorm*:DivU32*:KdaOpTest.*:QuantizeE4m3*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -8
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "OK \]|PASSED|FAILED|\[conf\]|\[fp8\]|Failure|Which is|differ" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
timeout 90 compute-sanitizer --tool memcheck $P/bin/$t --gtest_filter='Fp8Test.ActQuant*' > $O/memcheck.log 2>&1
echo "memcheck rc $? at ${SECONDS}s"; grep -E "ERROR SUMMARY|PASSED|FAILED" $O/memcheck.log | head -4; rm $O/memcheck.log
for base in 1 0; do
  PENSTOCK_MEMBW_BASELINE=$base timeout 60 $P/bin/penstock_bench_kernels --only fp8_quant --warmup 5 --reps 30 > $O/aq.base$base.jsonl 2>/dev/null
done
python3 - <<PY
import json, glob
for f in sorted(glob.glob('$O/aq.*.jsonl')):
    rs = [json.loads(l) for l in open(f) if l.startswith('{')]
    ceil = max(r.get('gbps', 0) for r in rs if r.get('bench') == 'copy_d2d')
    for r in rs:
        if r.get('bench') == 'fp8_act_quant':
            print(' ', f.split('/')[-1], 'T', r.get('rows'), 'k', r.get('k'), round(r.get('time_us', 0), 1), 'us', f"{100 * r.get('gbps', 0) / ceil:.1f}% of {ceil:.0f}")
PY
set +f  # (as run, this was missing: the cat / rm below failed and the two aq.base*.jsonl files came back as they were)
cat $O/aq.*.jsonl > $O/bench_aq.jsonl; rm $O/aq.*.jsonl
