#!/usr/bin/env bash
# Session 41, call D (bundle s41d = the stream top-k with L2 prefetch 1, beside s41a = 3d895b8, the same-call
# baseline): the top-k conformance, then GLM-5.3 layer 6 (native FP8, FP8 indexer, fp8-accumulate) at T 65536 and
# 16384, s41d / s41a / s41d, each T followed by torch_layer_baseline.py's composition (eager, torch.compile); then a
# 16K chunk after a 114688-token prefix (top-k rows of 114689-131072 keys), s41d / s41a.
set -uo pipefail
NAME=s41d; O=/tmp/out.s41d; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s41d.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
timeout 120 "$P/bin/cuda_kernels_test" --gtest_filter='DsaOpTest.Topk*' > "$O/conf.log" 2>&1
echo "top-k conformance rc $?: $(grep -c 'PASS$' "$O/conf.log") PASS, $(grep -c 'FAIL' "$O/conf.log") FAIL"
torch_layer() {  # MODEL TOKENS TIMEOUT
  PYTHONUNBUFFERED=1 timeout "$3" python3 tools/torch_layer_baseline.py --model "$1" --configs "$P/configs" \
    --tokens "$2" > "$O/torch.$1.$2.log" 2>&1
  echo "torch $1 $2 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.$1.$2.log"
}
topk_line() { python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]; b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print('   topk', round(b.get('layer.attn.indexer.topk', 0), 3), 'logits', round(b.get('layer.attn.indexer.logits', 0), 3))
" "$1"; }
for b in s41d s41a s41d; do
  LAYER_REPS=5 LAYER_TIMEOUT=100 layer $b glm64.$b.$SECONDS glm-5.3.json 6:7 65536 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
  topk_line "$(ls -t $O/glm64.$b.*.json | head -1)"
done
save
torch_layer glm-5.3 65536 200
save
for b in s41d s41a s41d; do
  layer $b glm16.$b.$SECONDS glm-5.3.json 6:7 16384 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
done
torch_layer glm-5.3 16384 120
save
for b in s41d s41a; do
  LAYER_REPS=5 LAYER_TIMEOUT=150 layer $b glm128.$b glm-5.3.json 6:7 16384 --prefix 114688 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
  topk_line "$O/glm128.$b.$b.json"
done
save
