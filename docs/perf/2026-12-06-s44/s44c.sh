#!/usr/bin/env bash
# Session 44, call C: bundle s44p = 26e99a5 + the KDA prep kernel's phase 4 rebalanced (the 7 pairs with a factor
# vector split over two k halves: 28 jobs of 8 slabs, the 3 adjacent pairs one job each; the jobs add into cleared
# L and A with shared-memory atomics, at most two addends; a pass then scales, rounds and masks) + the solve's X
# accesses as float2; s44f = 26e99a5 + the float2 accesses alone; s43k = 26e99a5's KDA code (session 43's bundle).
# The delta-rule conformance on s44p (fused and split) first; the kda bench s44p / s43k / s44f twice at 4K, 16K, 64K;
# the prep phase profile of s44p and s44f; Kimi K3 layer 1 (KDA) native FP8 at 16K, s44p / s43k / s44p; Nsight Compute
# on s44p's prep kernel if time is left.
set -uo pipefail
NAME=s44p; O=/tmp/out.s44c; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s44c.tgz" *.log *.json *.jsonl *.txt 2>/dev/null; cd - > /dev/null; }
timeout 120 "$P/bin/cuda_kernels_test" --gtest_filter='KdaOpTest.DeltaRule*' > "$O/conf.log" 2>&1
echo "delta-rule conformance rc $?: $(grep -c 'PASS$' "$O/conf.log") PASS lines, $(grep -c 'FAIL' "$O/conf.log") FAIL"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$O/conf.log"
save
grep -q "^\[  PASSED  \] 4 tests" "$O/conf.log" || { echo "conformance did not pass: stopping"; exit 0; }
kda_lines() {
  python3 -c "
import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{') and '\"kda_delta_rule\"' in l:
        r=json.loads(l)
        if r['variant']=='chunk_tensor_core_split': print(sys.argv[2], r['tokens'], round(r['ms'],3), r.get('max_abs_diff_vs_recurrent_16rows'))
" "$1" "$2"
}
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96,65536:96
for b in s44p s43k s44f s44p s43k s44f; do
  timeout 90 "/tmp/s/$b/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.$b.$SECONDS.jsonl" 2>&1
  echo "kda bench $b rc $? at ${SECONDS}s"; kda_lines "$(ls -t $O/kda.$b.*.jsonl | head -1)" $b
  save
done
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
for b in s44p s44f; do
  PENSTOCK_KDA_TC_PROFILE=1 timeout 60 "/tmp/s/$b/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 2 > "$O/kda.profile.$b.log" 2>&1
  echo "kda profile $b rc $?"; grep "kda_split" "$O/kda.profile.$b.log" | tail -1
done
save
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s44p k3kda.1 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s43k k3kda.2 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s44p k3kda.3 kimi-k3.json 1:2 16384 --fp8-weights native
save
if [ "${SECONDS}" -lt 330 ]; then
  NCU_TIMEOUT=150 ncu_sass kdaprep prep_kernel "$P/bin/penstock_bench_kernels" --only kda --warmup 0 --reps 1
fi
save
