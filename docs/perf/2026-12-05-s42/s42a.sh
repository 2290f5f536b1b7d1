#!/usr/bin/env bash
# Session 42, call A (bundle s42a = the screened heap replay for tied partial_sort rows, on fa26b72): the top-k
# conformance (every variant, the serial replay beside the screened one) and the host ports; the dsa bench (its last
# records: a 16K chunk after 48K / 112K prefixes, screened vs serial replay, same inputs); Kimi K3's MLA layer 3 at
# 16K with native FP8 (b023023's FP8 g_proj, first GPU run) and, on an H200, torch.compile's composition beside it;
# GLM-5.3 layer 6, a 16K chunk after a 114688-token prefix (rows of 114689-131072 keys).
set -uo pipefail
NAME=s42a; O=/tmp/out.s42a; source tools/device_bundle_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s42a.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
timeout 200 "$P/bin/cuda_kernels_test" --gtest_filter='DsaOpTest.Topk*:StlSelectPort.*' > "$O/conf.log" 2>&1
echo "top-k conformance rc $?: $(grep -c 'PASS$' "$O/conf.log") PASS lines, $(grep -c 'FAIL' "$O/conf.log") FAIL; $(grep -E '^\[  (PASSED|FAILED)' "$O/conf.log" | tr '\n' ' ')"
grep -E "^\[       OK|^\[  FAILED" "$O/conf.log" | head
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
grep -v '^{' "$O/dsa.jsonl" | tail -3
save
gate_line() { python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]; b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print('   out_gate', round(b.get('layer.attn.out_gate', 0), 3), 'q_proj', round(b.get('layer.attn.q_proj', 0), 3), 'o_proj', round(b.get('layer.attn.o_proj', 0), 3))
" "$1"; }
layer s42a k3mlaf8.1 kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention
gate_line "$O/k3mlaf8.1.s42a.json"
case "$gpu" in
  *H200*)
    PYTHONUNBUFFERED=1 timeout 150 python3 tools/torch_layer_baseline.py --model kimi-k3-mla --configs "$P/configs" \
      --tokens 16384 > "$O/torch.kimi-k3-mla.16384.log" 2>&1
    echo "torch kimi-k3-mla rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.kimi-k3-mla.16384.log" ;;
  *) echo "not an H200 ($gpu): torch's K3 composition does not fit; skipped" ;;
esac
layer s42a k3mlaf8.2 kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention
gate_line "$O/k3mlaf8.2.s42a.json"
save
topk_line() { python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]; b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print('   topk', round(b.get('layer.attn.indexer.topk', 0), 3), 'logits', round(b.get('layer.attn.indexer.logits', 0), 3))
" "$1"; }
[ "${SECONDS}" -lt 480 ] || exit 0
LAYER_REPS=5 LAYER_TIMEOUT=100 layer s42a glm128 glm-5.3.json 6:7 16384 --prefix 114688 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
topk_line "$O/glm128.s42a.json"
save
