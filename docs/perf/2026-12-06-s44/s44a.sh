#!/usr/bin/env bash
# Session 44, call A (session 43's call B, which never ran): bundle s43k = f5428e7 + the KDA split form's prep
# kernel with the decay scan over all threads and the next item's v prefetched into a second buffer (its k under
# U's stores) + the model bench's forward-alone time, beside s43b = f5428e7. The delta-rule conformance (fused,
# split); the kda bench s43k / s43b / s43k at 4K, 16K, 64K (96 heads); the prep kernel's phase profile; Kimi K3
# layer 1 (KDA) native FP8 at 16K, s43k / s43b / s43k; fla chunk_kda at 4K and 16K in the same call.
set -uo pipefail
NAME=s43k; O=/tmp/out.s44a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s44a.tgz" *.log *.json *.jsonl *.txt 2>/dev/null; cd - > /dev/null; }
timeout 120 "$P/bin/cuda_kernels_test" --gtest_filter='KdaOpTest.DeltaRule*' > "$O/conf.log" 2>&1
echo "delta-rule conformance rc $?: $(grep -c 'PASS$' "$O/conf.log") PASS lines, $(grep -c 'FAIL' "$O/conf.log") FAIL"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$O/conf.log"
save
kda_lines() {
  python3 -c "
import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{') and '\"kda_delta_rule\"' in l:
        r=json.loads(l)
        if r['variant'] in ('chunk_tensor_core_split','chunk_tensor_core'): print(sys.argv[2], r['tokens'], r['variant'], round(r['ms'],3), r.get('max_abs_diff_vs_recurrent_16rows'))
" "$1" "$2"
}
NAME=s43b; source tools/device_bundle_env.sh > /dev/null; NAME=s43k; P=/tmp/s/s43k
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96,65536:96
for b in s43k s43b s43k; do
  timeout 90 "/tmp/s/$b/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.$b.$SECONDS.jsonl" 2>&1
  echo "kda bench $b rc $? at ${SECONDS}s"; kda_lines "$(ls -t $O/kda.$b.*.jsonl | head -1)" $b
  save
done
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
PENSTOCK_KDA_TC_PROFILE=1 timeout 60 "$P/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 2 > "$O/kda.profile.log" 2>&1
echo "kda profile rc $?"; grep "kda_split" "$O/kda.profile.log" | tail -2
save
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s43k k3kda.1 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s43b k3kda.2 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s43k k3kda.3 kimi-k3.json 1:2 16384 --fp8-weights native
python3 -c "
import json
for t in ('k3kda.1.s43k','k3kda.3.s43k'):
    r=json.load(open('$O/'+t+'.json'))[0]; print('  ', t, 'forward', r['median_ms'], 'with setup', r.get('median_ms_with_setup'))"
save
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout 150 python3 tools/fla_kda_baseline.py 4096 16384 > "$O/fla.jsonl" 2> "$O/fla.err.log"
echo "fla rc $? at ${SECONDS}s"; cut -c1-300 "$O/fla.jsonl"
save
