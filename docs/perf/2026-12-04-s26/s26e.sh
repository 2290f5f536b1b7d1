#!/usr/bin/env bash
# Session 26, call E: where the GLM-5.3 layer's top-k time goes (the layer's top-k scope is 14.4 ms at 64K against
# 10.5 ms for the kernel bench's select kernel): Nsight Compute's duration of every dsa_topk kernel and of the indexer
# logits kernel of one rep at T 65536 (native FP8, FP8 indexer, fp8-accumulate) and at 16384 (without).
set -uo pipefail
N=${NAME:-s26e}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/out.$N; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for T in 65536 16384; do
  extra=""; [ $T = 65536 ] && extra="--dsa-fp8-accumulate"
  timeout 240 $NCU --clock-control none -k regex:'dsa_topk|indexer' --metrics gpu__time_duration.sum,launch__grid_size \
    $P/bin/penstock_model_bench --config $P/configs/glm-5.3.json --layers 6:7 --tokens $T --warmup 0 --reps 1 \
    --dsa-fp8-indexer $extra --fp8-weights native > $O/ncu.$T.log 2>&1
  echo "T $T rc $? at ${SECONDS}s"
  python3 - $O/ncu.$T.log <<'PY'
import re, sys
name = None
for line in open(sys.argv[1]):
    m = re.match(r'\s+(\S.*?)\s+\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)', line)
    if m: name = m.group(1)[:110]; grid = re.search(r'\((\d+), (\d+), (\d+)\)x\((\d+)', line).groups(); continue
    m = re.match(r'\s+gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)', line)
    if m and name: print(f"  {name}  grid {grid}  {m.group(2)} {m.group(1)}")
PY
done
cd $O && tar czf ${OUT:-/tmp}/$N.tgz *
