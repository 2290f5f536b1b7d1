#!/usr/bin/env bash
# Session 24, call A: the DSA and KDA conformance on the top-k tail batch (8 loads per thread for the keys past the select
# kernel's shared-memory cap), the dsa kernel bench (logits + top-k at 4K / 16K / 64K) of the new and the base binary,
# then the GLM-5.3 DSA layer at T 65536 (native FP8, FP8 indexer, fp8-accumulate) and the Kimi K3 KDA + MoE layer at
# 16K (native FP8; latent MoE projections in e4m3) of both binaries interleaved, and K3's torch + fla composition.
# bin/*.base: HEAD before this session's changes (the top-k without the tail batch, the latent projections dequantised).
set -uo pipefail
N=${NAME:-s24a}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/$N; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='DsaOpTest.*:KdaOpTest.*' > $O/conf.log 2>&1
echo "conformance rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED"
grep "FAILED" $O/conf.log | head -5
for b in new base; do
  bin=$P/bin/penstock_bench_kernels; [ $b = base ] && bin=$bin.base
  timeout 60 $bin --only dsa --warmup 2 --reps 7 > $O/dsa.$b.jsonl 2>&1
  echo "dsa bench $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r['bench'] == 'dsa_topk' and 'ms' in r: print(f\"T{r.get('tokens', r.get('T'))} {r['ms']:.3f} ms (mism {r.get('mismatches_vs_legacy')});\", end=' ')
" $O/dsa.$b.jsonl 2>/dev/null)"
done
summ() { python3 -c "
import json, sys
for r in json.load(open(sys.argv[1])):
    if 'median_ms' not in r: continue
    b = {x['scope']: x['median_ms'] for x in r.get('breakdown', [])}
    ks = [k for k in sys.argv[2:]]
    print(f\"{r['fp8_weights']} {r['median_ms']:.2f} ms (\" + ', '.join(f'{k.split(\".\")[-1]} {b.get(k, 0):.2f}' for k in ks) + f\"; J/rep {r.get('energy_j_per_rep', 0):.1f});\", end=' ')
" "$@" 2>/dev/null; }
for round in 1 2; do
  for b in new base; do
    bin=$P/bin/penstock_model_bench; [ $b = base ] && bin=$bin.base
    timeout 100 $bin --config $P/configs/glm-5.3.json --model-name glm.$b --layers 6:7 --tokens 65536 --reps 5 \
      --dsa-fp8-indexer --dsa-fp8-accumulate --fp8-weights native --breakdown --json $O/glm.$b.$round.json > $O/glm.$b.$round.log 2>&1
    echo "glm64K round $round $b rc $? at ${SECONDS}s: $(summ $O/glm.$b.$round.json layer.attn.indexer.logits layer.attn.indexer.topk)"
  done
done
for round in 1 2; do
  for b in new base; do
    bin=$P/bin/penstock_model_bench; [ $b = base ] && bin=$bin.base
    modes=native; [ $round = 1 ] && [ $b = new ] && modes=dequant,native
    timeout 100 $bin --config $P/configs/kimi-k3.json --model-name k3kda.$b --layers 1:2 --tokens 16384 --reps 5 \
      --fp8-weights $modes --breakdown --json $O/k3kda.$b.$round.json > $O/k3kda.$b.$round.log 2>&1
    echo "k3kda round $round $b rc $? at ${SECONDS}s: $(summ $O/k3kda.$b.$round.json layer.moe.latent_down layer.moe.latent_up layer.kda.gates layer.kda.gates.f_proj layer.kda.gates.decay layer.kda.gates.beta)"
  done
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site $P/whl/*.whl >/dev/null 2>&1
PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout 200 python3 $P/tools/torch_layer_baseline.py --model kimi-k3-kda \
  --configs $P/configs --tokens 16384 > $O/torch.kimi-k3-kda.log 2>&1
echo "torch rc $? at ${SECONDS}s"; grep "^# " $O/torch.kimi-k3-kda.log
cd $O && tar czf $OUT/s24a.tgz *.log *.json *.jsonl
