#!/usr/bin/env bash
# Session 23, call E: the Kimi K3 KDA + MoE layer (layer 1, 16K, bf16 and native FP8 weights) on 81e9e64 (native FP8
# full-rank output gate) interleaved with 40e37ed's binary (bin/penstock_model_bench.40e37ed: g_proj dequantised),
# two rounds, then the torch composition with fla's chunk_kda in the same call.
set -uo pipefail
N=${NAME:-s23e}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/s23e; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
for round in 1 2; do
  for b in 40e37ed new; do
    bin=$P/bin/penstock_model_bench; [ $b = 40e37ed ] && bin=$P/bin/penstock_model_bench.40e37ed
    timeout 100 $bin --config $P/configs/kimi-k3.json --model-name k3kda.$b --layers 1:2 --tokens 16384 --reps 5 \
      --fp8-weights dequant,native --breakdown --json $O/k3kda.$b.$round.json > $O/k3kda.$b.$round.log 2>&1
    echo "round $round $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
for r in json.load(open(sys.argv[1])):
    if 'median_ms' not in r: continue
    b = {x['scope']: x['median_ms'] for x in r.get('breakdown', [])}
    print(f\"{r['fp8_weights']} {r['median_ms']:.2f} ms (out_gate {b.get('layer.kda.out_gate', 0):.2f}, J/rep {r.get('energy_j_per_rep', 0):.1f});\", end=' ')
" $O/k3kda.$b.$round.json 2>/dev/null)"
  done
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site $P/whl/*.whl >/dev/null 2>&1
PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout 300 python3 $P/tools/torch_layer_baseline.py --model kimi-k3-kda \
  --configs $P/configs --tokens 16384 > $O/torch.kimi-k3-kda.log 2>&1
echo "torch rc $? at ${SECONDS}s"; grep "^# " $O/torch.kimi-k3-kda.log
cd $O && tar czf $OUT/s23e.tgz *.log *.json
