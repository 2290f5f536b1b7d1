#!/usr/bin/env bash
# Session 44, call B (session 43's call C, which never ran): bundle s43k. The layer goal rows with the model bench's
# forward-alone time (inputs made before the clock, as torch_layer_baseline.py does; median_ms_with_setup is the
# earlier measure) beside torch in the same call: DeepSeek-V3 layer 3 at 16K bf16 and native FP8 + --fp8-attention,
# around torch.compile; GLM-5.3 layer 6 at 16K (native FP8, FP8 indexer, fp8-accumulate) around torch's composition.
set -uo pipefail
NAME=s43k; O=/tmp/out.s44b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s44b.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
both() { python3 -c "
import json,sys
r=json.load(open(sys.argv[1]))[0]
print('   forward %.2f ms (min %.2f), with setup %.2f' % (r['median_ms'], r['min_ms'], r['median_ms_with_setup']))
" "$1"; }
torch_layer() {  # MODEL TOKENS TIMEOUT
  PYTHONUNBUFFERED=1 timeout "$3" python3 tools/torch_layer_baseline.py --model "$1" --configs "$P/configs" \
    --tokens "$2" > "$O/torch.$1.$2.log" 2>&1
  echo "torch $1 $2 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.$1.$2.log"
}
layer s43k dsv3bf.1 deepseek-v3.json 3:4 16384 --fp8-weights dequant; both "$O/dsv3bf.1.s43k.json"
layer s43k dsv3f8.1 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; both "$O/dsv3f8.1.s43k.json"
save
torch_layer deepseek-v3 16384 150
save
layer s43k dsv3bf.2 deepseek-v3.json 3:4 16384 --fp8-weights dequant; both "$O/dsv3bf.2.s43k.json"
layer s43k dsv3f8.2 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; both "$O/dsv3f8.2.s43k.json"
save
G=(--fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate)
layer s43k glm16.1 glm-5.3.json 6:7 16384 "${G[@]}"; both "$O/glm16.1.s43k.json"
[ "${SECONDS}" -lt 420 ] && torch_layer glm-5.3 16384 $((560 - SECONDS))
save
