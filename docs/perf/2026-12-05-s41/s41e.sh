#!/usr/bin/env bash
# Session 41, call E (bundle s41d = 28b7c0f, the stream top-k with L2 prefetch 1, beside s41a = 3d895b8; s41d.sh
# trimmed to the device time left after refused H200 requests): the top-k conformance; GLM-5.3 layer 6 (native FP8,
# FP8 indexer, fp8-accumulate) at T 65536, s41d / s41a, then torch_layer_baseline.py at 65536 (eager, torch.compile);
# a 16K chunk after a 114688-token prefix (top-k rows of 114689-131072 keys), s41d / s41a.
set -uo pipefail
NAME=s41d; O=/tmp/out.s41e; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s41e.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
timeout 60 "$P/bin/cuda_kernels_test" --gtest_filter='DsaOpTest.Topk*' > "$O/conf.log" 2>&1
echo "top-k conformance rc $?: $(grep -c 'PASS$' "$O/conf.log") PASS, $(grep -c 'FAIL' "$O/conf.log") FAIL"
topk_line() { python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]; b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print('   topk', round(b.get('layer.attn.indexer.topk', 0), 3), 'logits', round(b.get('layer.attn.indexer.logits', 0), 3))
" "$1"; }
for b in s41d s41a; do
  LAYER_REPS=5 LAYER_TIMEOUT=60 layer $b glm64 glm-5.3.json 6:7 65536 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
  topk_line "$O/glm64.$b.json"
done
save
for b in s41d s41a; do
  LAYER_REPS=5 LAYER_TIMEOUT=60 layer $b glm128 glm-5.3.json 6:7 16384 --prefix 114688 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
  topk_line "$O/glm128.$b.json"
done
save
PYTHONUNBUFFERED=1 timeout 150 python3 tools/torch_layer_baseline.py --model glm-5.3 --configs "$P/configs" \
  --tokens 65536 > "$O/torch.glm-5.3.65536.log" 2>&1
echo "torch glm-5.3 65536 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.glm-5.3.65536.log"
save
