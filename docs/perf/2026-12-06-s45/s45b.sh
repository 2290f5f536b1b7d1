#!/usr/bin/env bash
# Session 45, call B: bundle s45b = bea9d2b + the bf16 prep kernel's column pass with three exponentials per element
# (the B tiles and Kd from e^{G_last - G} and per-column factors; Q e^G from e^{G - ref} e^{ref}) and an experimental
# L2 prefetch of the next item's g, k, q (PENSTOCK_KDA_PREP_FLAGS=1; =3 also v), beside s45a (bea9d2b). Conformance on
# s45b (default and flags 3); the kda bench s45b / s45a / s45b flags 1 / s45b flags 3, twice; the phase profiles.
set -uo pipefail
NAME=s45b; O=/tmp/out.s45b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s45b.tgz" *.log *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" 'KdaOpTest.DeltaRuleChunkSplit*' || { save; echo "conformance did not pass: stopping"; exit 0; }
PENSTOCK_KDA_PREP_FLAGS=3 timeout 100 "$P/bin/cuda_kernels_test" --gtest_filter='KdaOpTest.DeltaRuleChunkSplit*' > "$O/conf.f3.log" 2>&1
echo "conformance flags 3 rc $?: $(grep -c 'PASS$' "$O/conf.f3.log") PASS, $(grep -c 'FAIL' "$O/conf.f3.log") FAIL"
save
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96,65536:96
run() {  # TAG BUNDLE FLAGS
  PENSTOCK_KDA_PREP_FLAGS=$3 timeout 90 "/tmp/s/$2/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.$1.$SECONDS.jsonl" 2>&1
  echo "kda bench $1 rc $? at ${SECONDS}s"; kda_split_lines "$(ls -t $O/kda.$1.*.jsonl | head -1)" $1
}
for round in 1 2; do
  run s45b s45b 0; run s45a s45a 0; run s45b.f1 s45b 1; run s45b.f3 s45b 3
  save
done
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
for v in "s45b 0" "s45a 0" "s45b 1"; do
  set -- $v
  PENSTOCK_KDA_PREP_FLAGS=$2 PENSTOCK_KDA_TC_PROFILE=1 timeout 60 "/tmp/s/$1/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 2 > "$O/kda.profile.$1.$2.log" 2>&1
  echo "kda profile $1 flags $2 rc $?"; grep "kda_split" "$O/kda.profile.$1.$2.log" | tail -1
done
save
