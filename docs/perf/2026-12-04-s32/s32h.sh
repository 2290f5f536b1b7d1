#!/usr/bin/env bash
# Session 32, call H: the landed code (c53fd5e, bundle s32h) through the GPU suites: the whole cuda_kernels_test and
# cuda_runtime_test (the models' CUDA paths take the new RoPE kernel), and the RoPE-related attention tests. Then
# Nsight Compute on the DeepSeek-V3 bf16 layer's two routed-expert GEMMs (the fused gate/up and the down projection,
# kTmaDynCluster) at 16K: why down runs at ~590 TFLOP/s against gate/up's ~645 (session 32's next item 2).
set -uo pipefail
NAME=s32h; O=/tmp/out.s32h; source tools/device_bundle_env.sh
for t in cuda_kernels_test cuda_runtime_test; do
  timeout 300 $P/bin/$t > $O/$t.log 2>&1
  echo "$t rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/$t.log | tr '\n' ' '); $(grep -c '| PASS' $O/$t.log) PASS, $(grep -c '| FAIL' $O/$t.log) FAIL conformance lines"
  grep -E "^\[  FAILED|\| FAIL|hangs" $O/$t.log | head -8
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
timeout 150 "$NCU" --clock-control none -k regex:grouped_gemm_tma_kernel --launch-count 2 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  --section LaunchStats -o $O/gg $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --layers 3:4 \
  --tokens 16384 --reps 1 --warmup 0 --fp8-weights dequant > $O/ncu.log 2>&1
echo "ncu rc $? at ${SECONDS}s"
"$NCU" -i $O/gg.ncu-rep --page details > $O/gg.details.txt 2>&1
rm -f $O/gg.ncu-rep
grep -E "grouped_gemm_tma_kernel|Duration|SM Frequency|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Issue Slots Busy|L2 Hit Rate|Warp Cycles Per Issued|Memory Throughput|DRAM Frequency" $O/gg.details.txt | cut -c1-140 | head -40
cd $O && tar czf ${OUT:-/tmp}/s32h.tgz *.log *.txt
