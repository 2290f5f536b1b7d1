#!/usr/bin/env bash
# Session 26, call G: the DSA top-k select kernel with its first step fused into the load pass (bins of the block's
# previous row; the usual first step when they do not stand for it): the DSA conformance (every top-k case on every
# variant against the CPU reference), the dsa kernel bench against main's binary alternated (two rounds), then the
# GLM-5.3 layer (native FP8, FP8 indexer) at T 65536 (fp8-accumulate) and T 16384 after a 65536-token prefix against
# f6b5439's binary, alternated, two rounds.
set -uo pipefail
N=${NAME:-s26g}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/out.$N; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='DsaOpTest.*' > $O/conf.log 2>&1
echo "DsaOpTest rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED, $(grep -c '| PASS' $O/conf.log) PASS, $(grep -c '| FAIL' $O/conf.log) FAIL"
grep -E "^\[  FAILED|\| FAIL" $O/conf.log | head
for round in 1 2; do
  for b in new base; do
    bin=$P/bin/penstock_bench_kernels; [ $b = base ] && bin=$bin.base
    timeout 90 $bin --only dsa --warmup 2 --reps 7 > $O/dsa.$b.$round.jsonl 2>&1
    echo "dsa bench $b $round: $(python3 -c "
import json, sys
out = []
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r['bench'] == 'dsa_topk' and 'ms' in r:
            out.append(f\"T{r.get('tokens')}{'r' if 'input' in r else ''} {r['ms']:.4f} ms tied {r.get('tied_rows')} mism {r.get('mismatches_vs_legacy')}\")
print('; '.join(out))" $O/dsa.$b.$round.jsonl)"
  done
done
summ() { python3 -c "
import json, sys
for r in json.load(open(sys.argv[1])):
    if 'median_ms' not in r: continue
    b = {x['scope']: x['median_ms'] for x in r.get('breakdown', [])}
    print(f\"{r['median_ms']:.2f} ms (topk {b.get('layer.attn.indexer.topk', 0):.2f}, logits {b.get('layer.attn.indexer.logits', 0):.2f})\", end=' ')
" "$@" 2>/dev/null; }
run() {  # name bin tokens prefix extra...
  local name=$1 bin=$2 T=$3 pre=$4; shift 4
  timeout 120 $bin --config $P/configs/glm-5.3.json --model-name glm --layers 6:7 --tokens $T --prefix $pre \
    --reps 5 --dsa-fp8-indexer --fp8-weights native --breakdown --json $O/$name.json "$@" > $O/$name.log 2>&1
  echo "$name rc $? at ${SECONDS}s: $(summ $O/$name.json)"
}
for round in 1 2; do
  run t64.new.$round $P/bin/penstock_model_bench 65536 0 --dsa-fp8-accumulate
  run t64.base.$round $P/bin/penstock_model_bench.base 65536 0 --dsa-fp8-accumulate
  run p64.new.$round $P/bin/penstock_model_bench 16384 65536
  run p64.base.$round $P/bin/penstock_model_bench.base 16384 65536
done
cd $O && tar czf ${OUT:-/tmp}/$N.tgz *
