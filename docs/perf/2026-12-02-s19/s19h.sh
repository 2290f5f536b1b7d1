#!/usr/bin/env bash
# Session 19, call H (binaries of call G, 474a9f9): where the ws attn_res_mix kernel's extra L2 write sectors come
# from: L2 sectors by source unit (SMs' L1TEX vs the other partition's fabric) and operation, the SMs' global store
# instructions and L1 store sectors, for the ws kernel (1 and 8 bank rows) and the two-pass kernel (1 bank row).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s19g.tar.xz -C /tmp/s
P=/tmp/s/s19g; O=$OUT/s19h; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"
B=$P/bin/penstock_bench_kernels
M=lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_ltcfabric_op_read.sum,lts__t_sectors_srcunit_ltcfabric_op_write.sum,lts__t_requests_srcunit_tex_op_write.sum,smsp__inst_executed_op_global_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,smsp__inst_executed_op_shared_st.sum,smsp__inst_executed_op_local_st.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_read.sum,dram__bytes_write.sum,gpu__time_duration.sum
for k in 'regex:attn_res_mix_ws_kernelILi2ELi4E' 'regex:attn_res_mix_ws_kernelILi2ELi9E'; do
  timeout 100 ncu --clock-control none --kernel-name-base mangled -k "$k" --launch-skip 3 --launch-count 1 --metrics $M $B --only elementwise --warmup 5 --reps 10 > $O/ncu.$(echo $k | grep -o 'ILi[0-9]ELi[0-9]*').txt 2>&1
done
PENSTOCK_MEMBW_BASELINE=1 timeout 100 ncu --clock-control none --kernel-name-base mangled -k 'regex:attn_res_mix_kernelI13__nv_bfloat16S3_Lb1E' --launch-skip 3 --launch-count 1 --metrics $M $B --only elementwise --warmup 5 --reps 10 > $O/ncu.twopass.txt 2>&1
for f in $O/ncu.*.txt; do echo "== $f"; grep -E "lts__|dram__|gpu__time|smsp__|l1tex__" $f; done
