#!/usr/bin/env bash
# Session 13, call E: where the FP8 attention kernel's time goes. Nsight Compute on its first launch in the kernel
# bench (mha_d128, 32 heads, 4K, e4m3 out) and on the DeepSeek-V3 shape (128 heads, d 192 / 128, 4K), and the SASS
# instruction mix of the 192 / 128 kernel.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s13d.tar.xz -C /tmp/s
P=/tmp/s/s13d
O=/tmp/s13e; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
cuobjdump --dump-sass --function '_ZN8penstock4cuda55_GLOBAL__N__8a39684c_22_attention_fp8_wgmma_cu_57aaf82120attention_fp8_kernelILi192ELi128E13__nv_bfloat16ELb1EEEv14CUtensorMap_stS4_S4_NS1_11Fp8AttnArgsE' $P/bin/penstock_bench_kernels > $O/sass_192.txt 2>&1 || cuobjdump --dump-sass $P/bin/penstock_bench_kernels 2>/dev/null | awk '/attention_fp8_kernelILi192ELi128E13__nv_bfloat16ELb1/{f=1} f{print} /EXIT/{if(f) c++} c>3{exit}' > $O/sass_192.txt
wc -l $O/sass_192.txt
for op in MUFU HGMMA WARPGROUP F2FP FMNMX FFMA FMUL FADD SHFL BAR SYNCS LDS BRA; do printf "%s %s\n" $op $(grep -c "$op" $O/sass_192.txt); done | tee $O/sass_mix.txt
timeout 200 $NCU --clock-control none --set full -k regex:attention_fp8_kernel -s 0 -c 1 -o $O/d128 $P/bin/penstock_bench_kernels --only attention > $O/ncu_d128.log 2>&1; echo "ncu rc $?"
timeout 60 $NCU --import $O/d128.ncu-rep --page details > $O/d128_details.txt 2>&1
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc|Stall|Warp Cycles Per Issued|No Eligible|Active Warps|Registers Per Thread|Tensor|L1/TEX Hit|Shared Memory|Pipe" $O/d128_details.txt | head -70
timeout 60 $NCU --import $O/d128.ncu-rep --page raw --csv 2>/dev/null | python3 -c "
import csv,sys
rows=list(csv.reader(sys.stdin))
h=rows[0]; v=rows[2] if len(rows)>2 else rows[1]
for k,x in zip(h,v):
    if 'smsp__pcsamp_warps_issue_stalled' in k and not k.endswith('_not_issued'):
        try:
            if float(x.replace(',',''))>0: print(k, x)
        except: pass
    if k.startswith('sm__pipe') and 'pct_of_peak_sustained_active' in k:
        try:
            if float(x.replace(',',''))>5: print(k, x)
        except: pass
" > $O/d128_stalls.txt 2>&1; sort -t' ' -k2 -g -r $O/d128_stalls.txt | head -40
tar -C /tmp -cJf $OUT/s13e.tar.xz s13e
