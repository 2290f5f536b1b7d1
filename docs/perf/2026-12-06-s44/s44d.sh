#!/usr/bin/env bash
# Session 44, call D: bundle s44r = s43k's model bench (26e99a5's source: the KDA prep patch, the forward-alone
# measure). Every layer goal row beside torch_layer_baseline.py in the same call, as session 41's call A did, now with
# the forward-alone measure: DeepSeek-V3 layer 3 bf16 and native FP8 + --fp8-attention (two rounds) around
# torch.compile; GLM-5.3 layer 6 at 16K and 64K (native FP8, FP8 indexer, fp8-accumulate); on an H200 also Kimi K3
# layer 1 (KDA, native FP8 and bf16) around torch.compile + fla chunk_kda and layer 3 (MLA) around torch.compile
# (torch's Kimi K3 compositions do not fit an H100).
set -uo pipefail
NAME=s44r; O=/tmp/out.s44d; source tools/device_bundle_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s44d.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
torch_layer() {  # MODEL TOKENS TIMEOUT
  PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout "$3" python3 tools/torch_layer_baseline.py --model "$1" \
    --configs "$P/configs" --tokens "$2" > "$O/torch.$1.$2.log" 2>&1
  echo "torch $1 $2 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.$1.$2.log"
}
G=(--fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate)
for round in 1 2; do
  layer s44r dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant
  layer s44r dsv3f8.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  [ $round = 1 ] && torch_layer deepseek-v3 16384 120
done
save
layer s44r glm16.1 glm-5.3.json 6:7 16384 "${G[@]}"
torch_layer glm-5.3 16384 120
save
case "$gpu" in
  *H200*)
    layer s44r k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
    layer s44r k3kdabf.1 kimi-k3.json 1:2 16384 --fp8-weights dequant
    torch_layer kimi-k3-kda 16384 200
    layer s44r k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
    save
    layer s44r k3mlaf8.1 kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention
    torch_layer kimi-k3-mla 16384 120
    save ;;
  *) echo "not an H200 ($gpu): the Kimi K3 rows need one" ;;
esac
if [ "${SECONDS}" -lt 420 ]; then
  LAYER_REPS=5 LAYER_TIMEOUT=100 layer s44r glm64.1 glm-5.3.json 6:7 65536 "${G[@]}"
  torch_layer glm-5.3 65536 $((585 - SECONDS))
fi
save
