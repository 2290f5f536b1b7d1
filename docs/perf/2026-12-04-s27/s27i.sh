#!/usr/bin/env bash
# Session 27, call I: which bf16 expert GEMM path the layers at 16K should take now (16630fb's model bench, bundle
# s27h), alternated. DeepSeek-V3 and GLM-5.3 have 512 rows per expert, above kAuto's 384-row limit, so they run
# cuBLASLt's per-group GEMMs (and the activation unfused); PENSTOCK_GROUPED_GEMM=device puts them on the device kernel
# (the fused gated GEMM for gate/up), on CTA pairs (the default) or single CTAs (PENSTOCK_GG_PAIRS=0). Kimi K3 (292 rows)
# takes the device kernel already: pairs against single CTAs.
set -uo pipefail
NAME=s27h; source tools/device_bundle_env.sh
layer() {  # mode tag cfg layers reps extra...
  local mode=$1 tag=$2 cfg=$3 lay=$4 reps=$5; shift 5
  local envs=""
  case $mode in
    auto) envs="" ;;
    dev) envs="PENSTOCK_GROUPED_GEMM=device" ;;
    dev1) envs="PENSTOCK_GROUPED_GEMM=device PENSTOCK_GG_PAIRS=0" ;;
    single) envs="PENSTOCK_GG_PAIRS=0" ;;
  esac
  env $envs timeout 100 $P/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay --tokens 16384 \
    --reps $reps --fp8-weights dequant --breakdown "$@" --json $O/$tag.$mode.json > $O/$tag.$mode.log 2>&1
  echo "$tag $mode rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (experts {b.get('layer.moe.experts', 0):.2f}: down {b.get('layer.moe.experts.down', 0):.2f}, gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f}; {r.get('mean_power_w', 0):.0f} W)\")" $O/$tag.$mode.json 2>/dev/null)"
}
for round in 1 2; do
  for mode in auto dev dev1; do layer $mode dsv3.$round deepseek-v3.json 3:4 8; done
done
for round in 1 2; do
  for mode in auto dev dev1; do layer $mode glm.$round glm-5.3.json 6:7 8 --dsa-fp8-indexer; done
done
for mode in auto single; do layer $mode k3kda kimi-k3.json 1:2 5; done
cd $O && tar czf ${OUT:-/tmp}/s27i.tgz *
