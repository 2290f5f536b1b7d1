#!/usr/bin/env bash
# Session 27, call A: the wgmma probe (bench/kernels/wgmma_probe.cu): chain patterns of the FP8 GEMMs without memory
# traffic, in ss and rs forms, with the promotion in line (promote) or off the chain's critical path (pipe).
set -uo pipefail
NAME=${NAME:-s27a}; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for r in 1 2; do
  $P/bin/penstock_bench_kernels --only wgmma_probe > $O/probe$r.jsonl 2> $O/probe$r.log
  echo "round $r rc $?"
done
python3 - "$O" <<'PY'
import json, sys
for r in (1, 2):
    for l in open(f"{sys.argv[1]}/probe{r}.jsonl"):
        if not l.startswith("{"): continue
        d = json.loads(l)
        print(r, d.get("form"), "n", d["n"], "x", d["chains_per_kstep"], d["mode"], "wgs", d["warpgroups"],
              "%.0f TFLOP/s" % d["tflops"], "%.3f us/chain" % d["us_per_chain"])
PY
cd $O && tar czf ${OUT:-/tmp}/s27a.tgz *
