#!/usr/bin/env bash
# Session 19, call F: the ws attn_res_mix kernel's L2 prefetch distance (PENSTOCK_MIX_PREFETCH = 0 / 1 / 2 / 3 tokens
# of the block ahead), alternating, with the two-pass kernel (PENSTOCK_MEMBW_BASELINE=1) in the same run; L2 sector
# counts by Nsight Compute (reads, writes, and those from the other L2 partition's fabric) for both kernels.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s19f.tar.xz -C /tmp/s
P=/tmp/s/s19f; O=$OUT/s19f; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t=cuda_kernels_test
timeout 60 $P/bin/$t --gtest_filter='KdaBf16OpTest.AttnResMix*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -4; echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"; rm $O/$t.log
B=$P/bin/penstock_bench_kernels
timeout 60 $B --only copy --warmup 5 --reps 30 > $O/bench_copy.jsonl 2>/dev/null
for r in 1 2; do
  PENSTOCK_MEMBW_BASELINE=1 timeout 60 $B --only elementwise --warmup 5 --reps 30 > $O/elem.twopass.r$r.jsonl 2>/dev/null
  for pf in 0 1 2 3; do PENSTOCK_MIX_PREFETCH=$pf timeout 60 $B --only elementwise --warmup 5 --reps 30 > $O/elem.pf$pf.r$r.jsonl 2>/dev/null; done
done
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
M=lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors.sum,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_sectors_srcunit_tex.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
for k in 'regex:attn_res_mix_ws_kernelILi2ELi4E' 'regex:attn_res_mix_ws_kernelILi2ELi9E'; do
  timeout 100 ncu --clock-control none --kernel-name-base mangled -k "$k" --launch-skip 3 --launch-count 1 --metrics $M $B --only elementwise --warmup 5 --reps 10 > $O/ncu.$(echo $k | grep -o 'ILi[0-9]ELi[0-9]*').txt 2>&1
done
for sk in 3 20; do
  PENSTOCK_MEMBW_BASELINE=1 timeout 100 ncu --clock-control none --kernel-name-base mangled -k 'regex:attn_res_mix_kernelI13__nv_bfloat16S3_Lb1E' --launch-skip $sk --launch-count 1 --metrics $M $B --only elementwise --warmup 5 --reps 10 > $O/ncu.twopass.skip$sk.txt 2>&1
done
for f in $O/ncu.*.txt; do echo "== $f"; grep -E "lts__|dram__|gpu__time" $f; done
tar -C $O -cJf $O/ncu.tar.xz $(cd $O && ls ncu.*.txt) && rm $O/ncu.*.txt
