#!/usr/bin/env bash
# Session 45, call H: bundle s45h = 50c9557 + the prep kernel issuing the next item's g and k register loads at the end of
# the solve (their latency overlaps the copy-out), beside s45e (6b16841). The split conformance on
# s45h; the kda bench s45h / s45e twice; the phase profiles.
set -uo pipefail
NAME=s45h; O=/tmp/out.s45h; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s45h.tgz" *.log *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" 'KdaOpTest.DeltaRuleChunkSplit*' 100 || { save; echo "conformance did not pass: stopping"; exit 0; }
save
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96,65536:96
for b in s45h s45e s45h s45e; do
  timeout 60 "/tmp/s/$b/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.$b.$SECONDS.jsonl" 2>&1
  echo "kda bench $b rc $? at ${SECONDS}s"; kda_split_lines "$(ls -t $O/kda.$b.*.jsonl | head -1)" $b
done
save
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
for b in s45h s45e; do
  PENSTOCK_KDA_TC_PROFILE=1 timeout 60 "/tmp/s/$b/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 2 > "$O/kda.profile.$b.log" 2>&1
  echo "kda profile $b rc $?"; grep "kda_split" "$O/kda.profile.$b.log" | tail -1
done
save
