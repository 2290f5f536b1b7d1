#!/usr/bin/env bash
# Session 17, call B: energy per layer (NVML counter, joules per rep) in interleaved A/Bs: the grouped-GEMM cuBLASLt loop
# on 1 vs 2 streams (bf16 DeepSeek-V3 / GLM-5.3 at 16K and 4K), and the FP8 DeepSeek-V3 layer beside them.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s17b.tar.xz -C /tmp/s
P=/tmp/s/s17b; O=/tmp/s17b; mkdir -p $O
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
PKG=$P OUT=$O/ab16 MODES="PENSTOCK_GROUPED_GEMM_STREAMS=1 default" LAYERS="dsv3 glm dsv3na" REPS=16 ROUNDS=3 \
  RUN_TIMEOUT=40 timeout 260 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab16/ab.log
PKG=$P OUT=$O/ab4 T=4096 MODES="PENSTOCK_GROUPED_GEMM_STREAMS=1 default" LAYERS="dsv3 glm" REPS=24 ROUNDS=3 \
  RUN_TIMEOUT=40 timeout 200 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab4/ab.log
python3 - <<PY
import json,glob,collections
for t in ('ab16','ab4'):
    d=collections.defaultdict(list)
    for f in sorted(glob.glob('$O/'+t+'/*.json')):
        b,m,r,_=f.split('/')[-1].split('.')
        for rec in json.load(open(f)):
            sc={x['scope']:x['median_ms'] for x in rec.get('breakdown',[])}
            d[(b,m)].append((rec['median_ms'],rec.get('energy_j_per_rep',0),rec.get('mean_power_w',0),sc.get('layer.moe.experts',0),sc.get('layer.attn.core.attention',0)))
    for k,v in sorted(d.items()):
        print(t, k, 'ms', [round(x[0],2) for x in v], 'J', [round(x[1],2) for x in v], 'W', [round(x[2]) for x in v], 'experts', [round(x[3],2) for x in v], 'attn', [round(x[4],2) for x in v])
PY
tar -C /tmp -cJf $OUT/s17b.tar.xz s17b
