#!/usr/bin/env bash
# Session 41, call F (bundle s41f = 427ee6a + the dsa bench's top-k after a prefix): penstock_bench_kernels --only
# dsa, whose last records time the top-k of a 16K chunk after 48K and 112K prefixes on the FP8-accumulate and exact
# logits (default vs kRangeRadixRowSmem, tied rows, global fallbacks).
set -uo pipefail
NAME=s41f; O=/tmp/out.s41f; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
timeout 100 "$P/bin/penstock_bench_kernels" --only dsa --warmup 1 --reps 3 > "$O/dsa.jsonl" 2>&1
echo "dsa bench rc $? at ${SECONDS}s"
python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r['bench'] == 'dsa_topk' and 'prefix' in r:
            print(r['input'], 'prefix', r['prefix'], 'ms', r['ms'], 'row_smem', r['row_smem_ms'], 'tied', r['tied_rows'], 'global', r['rows_from_global'], 'mism', r['mismatches_vs_row_smem'])
        elif r['bench'] == 'dsa_topk' and 'input' not in r:
            print('T', r['tokens'], 'ms', round(r['ms'], 4), 'row_smem', r.get('row_smem_ms'), 'tied', r.get('tied_rows'), 'global', r.get('rows_from_global'))
" "$O/dsa.jsonl"
grep -v '^{' "$O/dsa.jsonl" | tail -5
cp "$O/dsa.jsonl" "${OUT:-/tmp}/s41f.dsa.jsonl"
