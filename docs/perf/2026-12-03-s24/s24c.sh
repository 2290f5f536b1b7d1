#!/usr/bin/env bash
# Session 24, call C: the KDA conformance (gated_rms_norm's fused FP8 quantisation with out_scratch, bit for bit
# against the norm then fp8_act_quant on the GPU; the rest against the CPU reference), then the Kimi K3 KDA + MoE
# layer at 16K (native FP8; bf16 weights in round 1) of the new binary and 11cc502's (bin/*.base) interleaved.
set -uo pipefail
N=${NAME:-s24c}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/$N; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
timeout 200 $P/bin/cuda_kernels_test --gtest_filter='KdaOpTest.*' > $O/conf.log 2>&1
echo "conformance rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED"
grep -E "FAILED|differ" $O/conf.log | head -8
summ() { python3 -c "
import json, sys
for r in json.load(open(sys.argv[1])):
    if 'median_ms' not in r: continue
    b = {x['scope']: x['median_ms'] for x in r.get('breakdown', [])}
    ks = [k for k in sys.argv[2:]]
    print(f\"{r['fp8_weights']} {r['median_ms']:.2f} ms (\" + ', '.join(f'{k.split(\".\")[-1]} {b.get(k, 0):.2f}' for k in ks) + f\"; J/rep {r.get('energy_j_per_rep', 0):.1f});\", end=' ')
" "$@" 2>/dev/null; }
for round in 1 2 3 4; do
  for b in new base; do
    bin=$P/bin/penstock_model_bench; [ $b = base ] && bin=$bin.base
    modes=native; [ $round = 1 ] && modes=dequant,native
    timeout 100 $bin --config $P/configs/kimi-k3.json --model-name k3kda.$b --layers 1:2 --tokens 16384 --reps 5 \
      --fp8-weights $modes --breakdown --json $O/k3kda.$b.$round.json > $O/k3kda.$b.$round.log 2>&1
    echo "k3kda round $round $b rc $? at ${SECONDS}s: $(summ $O/k3kda.$b.$round.json layer.kda.gates layer.kda.recurrence layer.kda.o_norm layer.kda.o_proj layer.kda.o_proj.act_quant)"
  done
done
cd $O && tar czf $OUT/s24c.tgz *.log *.json
