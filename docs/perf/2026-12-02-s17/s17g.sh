#!/usr/bin/env bash
# Session 17, call G: the CTA-pair FP8 GEMM with and without the weight multicast (PENSTOCK_FP8_PAIR_NO_MC: each CTA
# loads both B halves, the pair's lockstep kept), to tell the multicast's cost from the lockstep's.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s17g.tar.xz -C /tmp/s
P=/tmp/s/s17g; O=/tmp/s17g; mkdir -p $O
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
for m in mc no_mc mc no_mc; do
  if [ $m = no_mc ]; then export PENSTOCK_FP8_PAIR_NO_MC=1; else unset PENSTOCK_FP8_PAIR_NO_MC; fi
  PENSTOCK_FP8_PAIR=1 timeout 100 $P/bin/penstock_bench_kernels --only fp8 > $O/fp8.$m.$SECONDS.jsonl 2>/dev/null
  echo "$m rc $? at ${SECONDS}s"
done
python3 - <<PY
import json,glob,collections
d=collections.defaultdict(list)
for f in sorted(glob.glob('$O/fp8.*.jsonl')):
    m=f.split('/')[-1].split('.')[1]
    for l in open(f):
        try: r=json.loads(l)
        except Exception: continue
        if r.get('variant') not in ('wgmma_tma_wide','wgmma_tma_pair'): continue
        d[(r['bench'], r.get('shape'), r.get('tokens'), r['variant'], m)].append(round(r['tflops']))
for k,v in sorted(d.items()): print(k, v)
PY
tar -C /tmp -cJf $OUT/s17g.tar.xz s17g
