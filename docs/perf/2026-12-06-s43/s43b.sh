#!/usr/bin/env bash
# Session 43, call B: bundle s43k = f5428e7 + the KDA split form's prep kernel with the decay scan over all threads
# and the next item's v prefetched into a second buffer (its k under U's stores), beside s43b = f5428e7. The delta-rule conformance (fused,
# split); the kda bench s43k / s43b / s43k at 4K, 16K, 64K (96 heads); the prep kernel's phase profile; Kimi K3
# layer 1 (KDA) native FP8 at 16K, s43k / s43b (s43k's model bench times the forward alone and reports the
# old measure, with the chunk's setup, as median_ms_with_setup); fla chunk_kda at 16K (same call) if time is left:
# the session's device time was nearly spent by refused starts.
set -uo pipefail
NAME=s43k; O=/tmp/out.s43b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s43b.tgz" *.log *.json *.jsonl *.txt 2>/dev/null; cd - > /dev/null; }
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
# (trimmed: the session's device time was nearly spent by refused starts; the K3 layer and fla runs were dropped)
# the model bench's new timing runs (forward alone, and median_ms_with_setup)
[ "${SECONDS}" -lt 200 ] && LAYER_REPS=3 LAYER_TIMEOUT=60 layer s43k dsv3f8.4k deepseek-v3.json 3:4 4096 --fp8-weights native && \
  python3 -c "
import json; r=json.load(open('$O/dsv3f8.4k.s43k.json'))[0]; print('   forward', r['median_ms'], 'with setup', r['median_ms_with_setup'])"
save
