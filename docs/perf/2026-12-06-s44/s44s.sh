#!/usr/bin/env bash
# Session 44, call S (never ran): bundle s44s = 26e99a5 + the KDA split form's state kernel loading each record with straight-line
# cp.async (every thread's copies at constant offsets from its first; was a loop over 18-19 pieces per thread with a
# five-way test of the record part per piece), beside s43k = 26e99a5's KDA code. The delta-rule conformance on s44s;
# the kda bench s44s / s43k three times at 4K, 16K, 64K; the phase profile (the state kernel's time) of both; Kimi K3
# layer 1 (KDA) native FP8 at 16K, s44s / s43k / s44s. (Trimmed to fit the session's last device minutes: the GLM-5.3
# 64K row and the per-line profile of s44e.sh did not run.)
set -uo pipefail
NAME=s44s; O=/tmp/out.s44s; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s44s.tgz" *.log *.json *.jsonl *.txt *.csv 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" 'KdaOpTest.DeltaRule*' || { save; echo "conformance did not pass: stopping"; exit 0; }
save
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96,65536:96
for b in s44s s43k s44s s43k s44s s43k; do
  timeout 90 "/tmp/s/$b/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.$b.$SECONDS.jsonl" 2>&1
  echo "kda bench $b rc $? at ${SECONDS}s"; kda_split_lines "$(ls -t $O/kda.$b.*.jsonl | head -1)" $b
  save
done
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
for b in s44s s43k; do
  PENSTOCK_KDA_TC_PROFILE=1 timeout 60 "/tmp/s/$b/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 2 > "$O/kda.profile.$b.log" 2>&1
  echo "kda profile $b rc $?"; grep "kda_split" "$O/kda.profile.$b.log" | tail -1
done
save
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s44s k3kda.1 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s43k k3kda.2 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s44s k3kda.3 kimi-k3.json 1:2 16384 --fp8-weights native
python3 -c "
import json
for t in ('k3kda.1.s44s','k3kda.2.s43k','k3kda.3.s44s'):
    r=json.load(open('$O/'+t+'.json'))[0]; b={x['scope']:x['median_ms'] for x in r['breakdown']}
    print('  ', t, 'forward', r['median_ms'], 'recurrence', round(b['layer.kda.recurrence'],3))"
save
