#!/usr/bin/env bash
# Session 56, call A (any GPU): is the sparse MLA kernel (kWgmmaPair) bound by its key gathers? Bundle s56a carries a
# diagnostic knob, PENSTOCK_MLA_GATHER_PROBE (bf16 output, skip-tail form only; not landed): the producer copies 5 of
# each key row's 9 128-byte blocks (value columns 0-255 and the rope; the other blocks keep stale data, so the outputs
# are wrong), the bytes and the L2 footprint of an FP8 latent row (512 e4m3 + 64 bf16 rope + a scale: 644 of 1152
# bytes). Runs: the mla kernel bench (sparse 16K / 64K / 128K prefixes, 64 and 128 heads) off, on, off, on; then
# GLM-5.3 layer 6 at T 65536 and 16384 (native FP8 weights, FP8 indexer, fp8-accumulate; the layer's downstream
# numbers are garbage with the probe on, so only the attention core scope counts) off, on, off, on.
#   run: bash docs/perf/2026-12-07-s56/s56a.sh, carry build-dev-lead/s56a.tar.xz
set -uo pipefail
NAME=s56a; O=/tmp/out.s56a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s56a.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
mla() {
  env $1 timeout 150 "${P}/bin/penstock_bench_kernels" --only mla > "${O}/mla.$2.jsonl" 2> "${O}/mla.$2.err"
  echo "mla $2 rc $? at ${SECONDS}s"
  python3 - "${O}/mla.$2.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get('bench') != 'mla_sparse' or 'pair' not in r.get('kernel', ''):
        continue
    print(f"  {r['kernel']:24s} prefix {r['prefix']:6d} heads {r['heads']:3d}: {r['time_us']:9.1f} us "
          f"{r.get('tflops', 0):6.1f} TFLOP/s {r['gbps']:7.0f} GB/s")
PY
  save
}
mla PENSTOCK_MLA_GATHER_PROBE_OFF=1 off1
mla PENSTOCK_MLA_GATHER_PROBE=1 on1
mla PENSTOCK_MLA_GATHER_PROBE_OFF=1 off2
mla PENSTOCK_MLA_GATHER_PROBE=1 on2
g() { LAYER_REPS=4 LAYER_TIMEOUT=90 layer s56a "glm$1.$2" glm-5.3.json 6:7 "$1" --fp8-weights native --dsa-fp8-indexer \
  --dsa-fp8-accumulate; save; }
for r in 1 2; do
  g 65536 off$r
  PENSTOCK_MLA_GATHER_PROBE=1 g 65536 on$r
done
for r in 1 2; do
  g 16384 off$r
  PENSTOCK_MLA_GATHER_PROBE=1 g 16384 on$r
done
date -u
