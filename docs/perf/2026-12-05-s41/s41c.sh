#!/usr/bin/env bash
# Session 41, call C (bundle s41c = b417e4c + the stream top-k's L2 prefetch knob and a forced-stream timing in the
# bench): the top-k conformance with PENSTOCK_TOPK_PREFETCH 0 and 2, then the dsa kernel bench at prefetch 0, 1, 2, 0.
set -uo pipefail
NAME=s41c; O=/tmp/out.s41c; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s41c.tgz" *.log *.jsonl 2>/dev/null; cd - > /dev/null; }
for pf in 0 2; do
  PENSTOCK_TOPK_PREFETCH=$pf timeout 120 "$P/bin/cuda_kernels_test" --gtest_filter='DsaOpTest.Topk*' > "$O/conf.pf$pf.log" 2>&1
  echo "top-k conformance prefetch $pf rc $?: $(grep -c 'PASS$' "$O/conf.pf$pf.log") PASS, $(grep -c 'FAIL' "$O/conf.pf$pf.log") FAIL"
done
for pf in 0 1 2 0b; do
  PENSTOCK_TOPK_PREFETCH=${pf%b} timeout 100 "$P/bin/penstock_bench_kernels" --only dsa --warmup 2 --reps 7 > "$O/dsa.pf$pf.jsonl" 2>&1
  echo "dsa bench prefetch $pf rc $? at ${SECONDS}s"
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r['bench'] == 'dsa_topk' and 'ms' in r and 'input' not in r:
            print(f\"  T{r.get('tokens')}: {r['ms']:.4f} / {r.get('ms_second_round', 0):.4f} / {r.get('ms_rounds_3_4')} ms; forced stream {r.get('stream_forced_ms', 0):.4f}; row_smem {r.get('row_smem_ms')}; global {r.get('rows_from_global')}; mism {r.get('mismatches_vs_legacy')} {r.get('mismatches_vs_legacy_round_4')} {r.get('stream_forced_mismatches_vs_legacy')}\")
" "$O/dsa.pf$pf.jsonl"
  save
done
