#!/usr/bin/env bash
# Session 40, call A (one H200): PERF.md's 16K layer goal rows at HEAD, each beside its baseline in the same call.
# DeepSeek-V3 layer 3: bf16 weights and native FP8 weights + --fp8-attention alternated three times (the FP8 goal's
# baseline is Penstock's own bf16 layer), torch_layer_baseline.py's composition (eager and torch.compile) between
# rounds 1 and 2; then GLM-5.3 layer 6 (a full-indexer DSA layer) at 16K: native FP8 with the FP8 indexer and
# fp8-accumulate (the fastest shipped options) and bf16 weights with the default indexer, beside torch's composition.
# Bundle: tools/pack_session_bundle.sh build-cuda s40a "..." (carry build-dev-lead/s40a.tar.xz).
set -uo pipefail
NAME=s40a; O=/tmp/out.s40a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
torch_layer() {  # MODEL TOKENS TIMEOUT
  PYTHONUNBUFFERED=1 timeout "$3" python3 tools/torch_layer_baseline.py --model "$1" --configs "$P/configs" \
    --tokens "$2" > "$O/torch.$1.$2.log" 2>&1
  echo "torch $1 $2 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.$1.$2.log"
}
save() { cd "$O" && tar czf "${OUT:-/tmp}/s40a.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
for round in 1 2 3; do
  layer s40a dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant
  layer s40a dsv3f8.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  [ $round = 1 ] && torch_layer deepseek-v3 16384 150
done
save
for round in 1 2; do
  layer s40a glmf8.$round glm-5.3.json 6:7 16384 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
  layer s40a glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant
  [ $round = 1 ] && torch_layer glm-5.3 16384 200
done
save
