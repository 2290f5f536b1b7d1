#!/usr/bin/env bash
# Session 42, call B (bundle s42b = s42a + the heap replay's pops in int indices with a hole's children in one
# 16-byte load): the top-k conformance and host ports; the dsa bench (a 16K chunk after 48K / 112K prefixes: default
# vs the serial replay, same inputs); then, when nsys is there, the dsa bench's kernels traced (each launch's time, for
# the prefix calls' pass 1 / replay split); Nsight Compute on the stream kernel's launch in GLM-5.3's 64K layer (where
# its 8.6 GB of logits run at ~1.4 TB/s).
set -uo pipefail
NAME=s42b; O=/tmp/out.s42b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s42b.tgz" *.log *.jsonl *.csv 2>/dev/null; cd - > /dev/null; }
timeout 200 "$P/bin/cuda_kernels_test" --gtest_filter='DsaOpTest.Topk*:StlSelectPort.*' > "$O/conf.log" 2>&1
echo "top-k conformance rc $?: $(grep -c 'PASS$' "$O/conf.log") PASS lines, $(grep -c 'FAIL' "$O/conf.log") FAIL; $(grep -E '^\[  (PASSED|FAILED)' "$O/conf.log" | tr '\n' ' ')"
save
timeout 150 "$P/bin/penstock_bench_kernels" --only dsa --warmup 1 --reps 3 > "$O/dsa.jsonl" 2>&1
echo "dsa bench rc $? at ${SECONDS}s"
python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r['bench'] == 'dsa_topk' and 'prefix' in r:
            print(r['input'], 'prefix', r['prefix'], 'ms', r['ms'], 'serial', r.get('serial_replay_ms'), 'row_smem', r['row_smem_ms'], 'tied', r['tied_rows'], 'global', r['rows_from_global'], 'mism', r['mismatches_vs_row_smem'], r.get('mismatches_vs_serial_replay'))
        elif r['bench'] == 'dsa_topk' and 'input' not in r:
            print('T', r['tokens'], 'ms', round(r['ms'], 4), 'row_smem', r.get('row_smem_ms'), 'tied', r.get('tied_rows'), 'global', r.get('rows_from_global'))
" "$O/dsa.jsonl"
save
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  timeout 200 "$NSYS" profile -o "$O/dsa" --force-overwrite true -t cuda "$P/bin/penstock_bench_kernels" --only dsa \
    --warmup 1 --reps 3 > "$O/nsys.log" 2>&1
  echo "nsys rc $? at ${SECONDS}s"
  "$NSYS" stats -r cuda_gpu_trace -f csv -o "$O/trace" "$O/dsa.nsys-rep" > /dev/null 2>&1
  f=$(ls "$O"/trace*.csv | head -1)
  python3 - "$f" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ks = [r for r in rows if 'dsa_topk' in r.get('Name', '')]
# the last launches: the 112K-prefix calls (default, serial) on both logits
for r in ks[-40:]:
    print(round(float(r['Duration (ns)']) / 1e6, 3), 'ms', r['Name'][:90])
PY
else
  echo "no nsys"
fi
save
[ "${SECONDS}" -lt 420 ] || exit 0
ncu_sass topk_stream dsa_topk_stream_kernel "$P/bin/penstock_model_bench" --config "$P/configs/glm-5.3.json" \
  --layers 6:7 --tokens 65536 --reps 1 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
grep -E "DRAM Throughput|Memory Throughput|L2 Hit|Achieved Occupancy|Stall|Block Limit" "$O/topk_stream.details.txt" | head -20
cp "$O"/topk_stream.*.txt "$O/" 2>/dev/null
cd "$O" && tar czf "${OUT:-/tmp}/s42b.tgz" *.log *.jsonl *.csv *.txt 2>/dev/null
