#!/usr/bin/env bash
# Session 48, call E (any GPU): bundle s48d (3c2bee9's code: the FP8 attention's FMA-pipe exponentials in f16x2,
# default 6 of 16 column blocks). Conformance of the final code (Fp8AttentionTest), the DeepSeek-V3 layer 3 at 16K,
# bf16 and native FP8 + --fp8-attention, around torch.compile's composition in the same call, then Nsight Compute's
# per-instruction stall samples of the FP8 attention kernel in that layer (where a consumer warp's time goes now).
set -uo pipefail
NAME=s48d; O=/tmp/out.s48e; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s48e.tgz" *.log *.json *.txt 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_attention_cudnn_test" 'Fp8AttentionTest.*' 200 || { save; grep -E "FAIL" "$O/conf.log" | head; exit 0; }
save
for r in 1 2; do
  LAYER_REPS=6 layer s48d dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer s48d dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done
torch_layer deepseek-v3 16384 150
for r in 3 4; do
  LAYER_REPS=6 layer s48d dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer s48d dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done
save
[ "${SECONDS}" -lt 420 ] || exit 0
NCU_TIMEOUT=120 ncu_sass fp8attn attention_fp8_kernel "$P/bin/penstock_model_bench" --config "$P/configs/deepseek-v3.json" \
  --layers 3:4 --tokens 16384 --reps 1 --fp8-weights native --fp8-attention
save
