#!/usr/bin/env bash
# Session 19, call C: Nsight Compute on the warp-specialised attn_res_mix kernel (1 and 8 bank rows) and on the
# two-pass one (8 bank rows), to see what bounds them; the FP8 GEMM tests under the 256-row pair threshold.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s19c.tar.xz -C /tmp/s
P=/tmp/s/s19c; O=$OUT/s19c; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"
t=cuda_kernels_test
timeout 100 $P/bin/$t --gtest_filter='Fp8Test.*Gemm*:Fp8TmaTest.*:KdaBf16OpTest.AttnResMix*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -6
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"; rm $O/$t.log
B=$P/bin/penstock_bench_kernels
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters"
for k in 'regex:attn_res_mix_ws_kernelILi4ELi4E' 'regex:attn_res_mix_ws_kernelILi2ELi16E'; do
  timeout 150 ncu --clock-control none --kernel-name-base mangled -k "$k" --launch-skip 3 --launch-count 1 $SEC $B --only elementwise --warmup 5 --reps 10 > $O/ncu.$(echo $k | grep -o 'ILi[0-9]ELi[0-9]*').txt 2>&1
  echo "ncu $k rc $? at ${SECONDS}s"
done
PENSTOCK_MEMBW_BASELINE=1 timeout 150 ncu --clock-control none --kernel-name-base mangled -k 'regex:attn_res_mix_kernelI13__nv_bfloat16S3_Lb1E' --launch-skip 20 --launch-count 1 $SEC $B --only elementwise --warmup 5 --reps 10 > $O/ncu.twopass.txt 2>&1
echo "ncu two-pass rc $? at ${SECONDS}s"
for f in $O/ncu.*.txt; do echo "== $f"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Block Size|Grid Size|Dynamic Shared|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|L2 Hit|L1/TEX Hit" $f | head -30; done
tar -C $O -cJf $O/ncu.tar.xz $(cd $O && ls ncu.*.txt) && rm $O/ncu.*.txt
