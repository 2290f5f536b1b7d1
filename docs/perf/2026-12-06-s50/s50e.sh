#!/usr/bin/env bash
# Session 50, call E (run as one command on the same warm H100): Nsight Compute (ncu_sass, tools/device_bundle_env.sh)
# on the first fp8_gemm_tma_kernel launch of the DeepSeek-V3 FP8 layer at 16K (the routed experts' fused gate/up GEMM,
# the CTA-pair kernel), s50b then s50a.
NAME=s50b; O=/tmp/out.s50e; source tools/device_bundle_env.sh
for b in s50b s50a; do
  ncu_sass gateup_$b fp8_gemm_tma_kernel /tmp/s/$b/bin/penstock_model_bench --config $P/configs/deepseek-v3.json \
    --layers 3:4 --tokens 16384 --reps 1 --fp8-weights native --fp8-attention
  head -2 $O/gateup_$b.details.txt | tail -1 | cut -c1-90
done
cd $O && tar czf $OUT/s50e.tgz *.txt *.log
