#!/usr/bin/env bash
# Session 29, call G: layers only, the three attention builds of bundle s29f alternated: s29d (persistent FP8
# attention, an item at a time), s29f (the items' tiles as one stream), s28h (d434f62's per-CTA kernels).
# DeepSeek-V3 FP8 + --fp8-attention at T = 16384 (3 rounds) and 4096 (2 rounds), Kimi K3's MLA layer at 16384.
set -uo pipefail
NAME=s29f; source tools/device_bundle_env.sh
layer() {  # bundle tag cfg layers tokens extra...
  local b=$1 tag=$2 cfg=$3 lay=$4 tok=$5; shift 5
  timeout 100 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay \
    --tokens $tok --reps 8 --breakdown "$@" --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (attention {b.get('layer.attn.core.attention', 0):.3f}, core {b.get('layer.attn.core', 0):.2f}, experts {b.get('layer.moe.experts', 0):.2f})\")" $O/$tag.$b.json 2>/dev/null)"
}
for round in 1 2 3; do
  for b in s29d s29f s28h; do layer $b dsv3f8.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; done
done
for round in 1 2; do
  for b in s29d s29f s28h; do layer $b dsv3f8_4k.$round deepseek-v3.json 3:4 4096 --fp8-weights native --fp8-attention; done
done
for round in 1 2; do
  for b in s29d s28h; do layer $b k3mla.$round kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention; done
done
cd $O && tar czf ${OUT:-/tmp}/s29g.tgz *.log *.json
