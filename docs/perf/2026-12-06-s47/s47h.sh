#!/usr/bin/env bash
# Session 47, call H (any GPU): the final same-call goal rows with bundle s47g (= 2255425's code, HEAD's): the
# DeepSeek-V3 layer at 16K with bf16 weights and with native FP8 + --fp8-attention, interleaved, torch.compile's layer,
# and Kimi K3's MLA layer both ways.
set -uo pipefail
NAME=s47g; O=/tmp/out.s47h; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s47h.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
for r in 1 2 3; do
  LAYER_REPS=6 layer s47g dsv3bf.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer s47g dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done
save
torch_layer deepseek-v3 16384 120
save
LAYER_REPS=5 layer s47g k3mlabf kimi-k3.json 3:4 16384 --fp8-weights dequant
LAYER_REPS=5 layer s47g k3mlaf8 kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention
LAYER_REPS=6 layer s47g dsv3bf.4 deepseek-v3.json 3:4 16384 --fp8-weights dequant
LAYER_REPS=6 layer s47g dsv3f8.4 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
save
