#!/usr/bin/env bash
# Session 11, call I: Nsight Compute on fp8_act_quant's 8-wide kernel inside the DeepSeek-V3 FP8 layer at 16K (the
# first forward's launches): where its time goes.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s11.tar.xz -C /tmp/s; P=/tmp/s/s11
O=/tmp/s11i; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_LIB
timeout 240 /usr/local/cuda/bin/ncu -k "regex:fp8_act_quant_x8" --launch-count 5 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
  $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --layers 3:4 --tokens 16384 --reps 1 --fp8-weights native > $O/ncu_actq.txt 2>&1
echo "rc $?"
grep -E "fp8_act_quant_x8|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Grid Size|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|L2 Hit Rate" $O/ncu_actq.txt | head -70
tar -C /tmp -cJf $OUT/s11i.tar.xz s11i
