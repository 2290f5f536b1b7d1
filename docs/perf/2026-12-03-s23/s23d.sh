#!/usr/bin/env bash
# Session 23, call D: the GLM-5.3 DSA layer at a 64K-token prompt (T 65536, prefix 0; FP8 indexer; bf16 and native
# FP8 weights), exact logits and --dsa-fp8-accumulate, then its torch composition (eager, torch.compile) in the same
# call.
set -uo pipefail
N=${NAME:-s23c}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/s23d; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
for mode in exact acc; do
  extra=""; [ $mode = acc ] && extra="--dsa-fp8-accumulate"
  timeout 100 $P/bin/penstock_model_bench --config $P/configs/glm-5.3.json --model-name glm.$mode --layers 6:7 \
    --tokens 65536 --reps 5 --dsa-fp8-indexer --fp8-weights dequant,native --breakdown $extra \
    --json $O/glm.$mode.json > $O/glm.$mode.log 2>&1
  echo "$mode rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
for r in json.load(open(sys.argv[1])):
    if 'median_ms' not in r: continue
    b = {x['scope']: x['median_ms'] for x in r.get('breakdown', [])}
    print(f\"T{r['tokens']} {r['fp8_weights']} {r['median_ms']:.2f} ms (logits {b.get('layer.attn.indexer.logits', 0):.2f}, topk {b.get('layer.attn.indexer.topk', 0):.2f});\", end=' ')
" $O/glm.$mode.json 2>/dev/null)"
done
PYTHONUNBUFFERED=1 timeout 300 python3 $P/tools/torch_layer_baseline.py --model glm-5.3 --configs $P/configs \
  --tokens 65536 > $O/torch.glm-5.3.log 2>&1
echo "torch rc $? at ${SECONDS}s"; grep "^# " $O/torch.glm-5.3.log
cd $O && tar czf $OUT/s23d.tgz *.log *.json
