#!/usr/bin/env bash
# Session 27, call H: 16630fb (the session's two epilogue commits) against s26f's model bench (f6b5439): the DeepSeek-V3
# layer with bf16 weights (--fp8-weights dequant) at 16K, alternated, and GLM-5.3 at T 65536 (native FP8, FP8 indexer,
# fp8-accumulate), alternated.
set -uo pipefail
NAME=s27h; source tools/device_bundle_env.sh   # the tarball holds s27h and s26f
layer() {  # bundle tag cfg layers tokens reps extra...
  local b=$1 tag=$2 cfg=$3 lay=$4 tok=$5 reps=$6; shift 6
  timeout 120 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay --tokens $tok --reps $reps \
    --breakdown "$@" --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (down {b.get('layer.moe.experts.down', 0):.2f}, gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f})\")" $O/$tag.$b.json 2>/dev/null)"
}
for round in 1 2; do
  for b in s27h s26f; do layer $b dsv3bf16.$round deepseek-v3.json 3:4 16384 8 --fp8-weights dequant; done
done
for b in s27h s26f; do
  layer $b glm64k.$b glm-5.3.json 6:7 65536 5 --dsa-fp8-indexer --dsa-fp8-accumulate --fp8-weights native
done
cd $O && tar czf ${OUT:-/tmp}/s27h.tgz *
