#!/usr/bin/env bash
# Session 19, call E: the warp-specialised attn_res_mix kernel with two consumer groups and sleeping waits: the KDA op tests
# (bf16 and f32), the elementwise bench with the two-pass kernel (PENSTOCK_MEMBW_BASELINE=1) and the new one
# alternating, the copy ceiling; then the (no layer runs: FP8 pairs on Kimi K3 were in call B)'s MLA layer at 16K (292 rows per expert) again.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s19e.tar.xz -C /tmp/s
P=/tmp/s/s19e; O=$OUT/s19e; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t=cuda_kernels_test
timeout 100 $P/bin/$t --gtest_filter='KdaBf16OpTest.*:KdaOpTest.*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -12
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "\[conf\].*FAIL" $O/$t.log | head -5
grep -E "OK \]|PASSED|FAILED|\[conf\].*attn_res" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
timeout 120 compute-sanitizer --tool memcheck $P/bin/$t --gtest_filter='KdaBf16OpTest.AttnResMix*' > $O/memcheck.log 2>&1; echo "memcheck rc $? at ${SECONDS}s"
grep -E "ERROR SUMMARY|PASSED|FAILED" $O/memcheck.log | head -4; tail -c 3000 $O/memcheck.log > $O/memcheck.tail.log; rm $O/memcheck.log
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
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis"
for k in 'regex:attn_res_mix_ws_kernelILi2ELi4E' 'regex:attn_res_mix_ws_kernelILi2ELi9E'; do
  timeout 150 ncu --clock-control none --kernel-name-base mangled -k "$k" --launch-skip 3 --launch-count 1 $SEC $B --only elementwise --warmup 5 --reps 10 > $O/ncu.$(echo $k | grep -o 'ILi[0-9]ELi[0-9]*').txt 2>&1
  echo "ncu $k rc $? at ${SECONDS}s"
done
for f in $O/ncu.*.txt; do echo "== $f"; grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Block Size|Grid Size|No Eligible|Warp Cycles Per Issued|L2 Hit|Issued Warp" $f | head -14; done
tar -C $O -cJf $O/ncu.tar.xz $(cd $O && ls ncu.*.txt) && rm $O/ncu.*.txt
