#!/usr/bin/env bash
# Session 51, call A (any GPU): the wgmma probe with three and four warpgroups per CTA beside the two-warpgroup rows
# of the same launch (bundle s51a: 05089c9 + the probe's kWgs template parameter), two rounds.
set -uo pipefail
NAME=s51a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
for r in 1 2; do
  "${P}/bin/penstock_bench_kernels" --only wgmma_probe > "${O}/probe.${r}.jsonl" 2> "${O}/probe.${r}.log"
  echo "round ${r} rc $?"
done
python3 - "${O}" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/probe.*.jsonl")):
    for line in open(f):
        if not line.startswith("{"): continue
        r = json.loads(line)
        print(f.split("/")[-1], r.get("cta_warpgroups", 2), r["warpgroups"], r["n"], r["chains_per_kstep"], r["mode"],
              r["form"], round(r["tflops"]))
PY
cd "${O}" && tar czf "${OUT:-/tmp}/s51a.tgz" * && cd - > /dev/null
