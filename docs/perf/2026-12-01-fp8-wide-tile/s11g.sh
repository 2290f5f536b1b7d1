#!/usr/bin/env bash
# Session 11, call G: Nsight Compute on the DeepSeek-V3 native-FP8 layer at T = 16384: the fused gated expert GEMM
# (fp8_gemm_tma_kernel<bf16, 256, kActSilu>) and the plain wide one (the down projection), one launch each.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s11.tar.xz -C /tmp/s; P=/tmp/s/s11
O=/tmp/s11g; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1); echo "ncu: $NCU commit $(cat $P/COMMIT)"
for k in Li256ELi1E Li256ELi0E; do
  timeout 240 $NCU --kernel-name-base mangled -k "regex:fp8_gemm_tma_kernel.*${k}" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
    --section WarpStateStats --section SchedulerStats \
    $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --layers 3:4 --tokens 16384 --reps 1 \
    --fp8-weights native > $O/ncu_$k.txt 2>&1
  echo "$k rc $?"; grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Executed Ipc Active|Issue Slots Busy|No Eligible|Stall|L1/TEX Hit|L2 Hit" $O/ncu_$k.txt | head -24
done
tar -C /tmp -cJf $OUT/s11g.tar.xz s11g
