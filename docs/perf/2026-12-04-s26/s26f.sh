#!/usr/bin/env bash
# Session 26, call F: SPEC §3's run-time DSA logits budget (min(20% of free memory outside the pool, 30% of device
# memory) instead of a fixed 1 GiB on CUDA): the caching allocator tests (device_memory counts cached blocks as free),
# then the GLM-5.3 layer (native FP8, FP8 indexer) with the default budget against --dsa-logits-budget-mib 1024 (the
# old fixed value), same binary, alternated: T 65536 (fp8-accumulate), T 16384 after a 65536-token prefix, T 16384.
set -uo pipefail
N=${NAME:-s26f}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/out.$N; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
timeout 60 $P/bin/cuda_runtime_test --gtest_filter='CachingAllocator*:Workspace*' > $O/alloc.log 2>&1
echo "allocator tests rc $?: $(grep -c '^\[       OK' $O/alloc.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/alloc.log) FAILED"
grep -E "FAILED|Failure" -A3 $O/alloc.log | head
summ() { python3 -c "
import json, sys
for r in json.load(open(sys.argv[1])):
    if 'median_ms' not in r: continue
    b = {x['scope']: x['median_ms'] for x in r.get('breakdown', [])}
    print(f\"{r['median_ms']:.2f} ms (logits {b.get('layer.attn.indexer.logits', 0):.2f}, topk {b.get('layer.attn.indexer.topk', 0):.2f}, indexer {b.get('layer.attn.indexer', 0):.2f}; mem {r.get('device_mem_used_gib', 0):.1f} GiB)\", end=' ')
" "$@" 2>/dev/null; }
run() {  # name tokens prefix budget extra...
  local name=$1 T=$2 pre=$3 mib=$4; shift 4
  timeout 120 $P/bin/penstock_model_bench --config $P/configs/glm-5.3.json --model-name glm --layers 6:7 --tokens $T --prefix $pre \
    --reps 5 --dsa-fp8-indexer --fp8-weights native --dsa-logits-budget-mib $mib --breakdown --json $O/$name.json "$@" > $O/$name.log 2>&1
  echo "$name rc $? at ${SECONDS}s: $(summ $O/$name.json)"
}
for round in 1 2; do
  run t64.default.$round 65536 0 0 --dsa-fp8-accumulate
  run t64.1gib.$round 65536 0 1024 --dsa-fp8-accumulate
done
for round in 1 2; do
  run p64.default.$round 16384 65536 0
  run p64.1gib.$round 16384 65536 1024
done
run t16.default 16384 0 0
run t16.1gib 16384 0 1024
cd $O && tar czf ${OUT:-/tmp}/$N.tgz *
