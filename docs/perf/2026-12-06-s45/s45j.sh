#!/usr/bin/env bash
# Session 45, call J (not run: no device time left; the next session's first call): bundle s45j = fbb4398 +
# kda_state_three_stages.patch (the KDA state kernel's record stages unpadded with the 16-byte chunks XOR-swizzled by
# row, so three stages fit: the next two chunks' records in flight instead of one), beside s45e (6b16841). The
# delta-rule conformance on s45j first (the split form reads every record part through the swizzle); the kda bench
# s45j / s45e three times; the phase profiles (state kernel time); Kimi K3 layer 1 (KDA) native FP8, s45j / s45e / s45j.
# Then, with the time left, Nsight on both state kernels (s45i.sh's sections).
set -uo pipefail
NAME=s45j; O=/tmp/out.s45j; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s45j.tgz" *.log *.json *.jsonl *.txt 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" 'KdaOpTest.DeltaRule*' 150 || { save; echo "conformance did not pass: stopping"; exit 0; }
save
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96,65536:96
for b in s45j s45e s45j s45e s45j s45e; do
  timeout 60 "/tmp/s/$b/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.$b.$SECONDS.jsonl" 2>&1
  echo "kda bench $b rc $? at ${SECONDS}s"; kda_split_lines "$(ls -t $O/kda.$b.*.jsonl | head -1)" $b
done
save
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
for b in s45j s45e; do
  PENSTOCK_KDA_TC_PROFILE=1 timeout 60 "/tmp/s/$b/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 2 > "$O/kda.profile.$b.log" 2>&1
  echo "kda profile $b rc $?"; grep "kda_split" "$O/kda.profile.$b.log" | tail -1
done
save
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s45j k3kda.1 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s45e k3kda.2 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s45j k3kda.3 kimi-k3.json 1:2 16384 --fp8-weights native
save
ncu=/usr/local/cuda/bin/ncu
for b in s45j s45e; do
  timeout 120 $ncu --clock-control none -k regex:delta_rule_state_kernel --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters -o "$O/st.$b" \
    "/tmp/s/$b/bin/penstock_bench_kernels" --only kda --warmup 0 --reps 1 > "$O/st.$b.ncu.log" 2>&1
  $ncu -i "$O/st.$b.ncu-rep" --page details > "$O/st.$b.details.txt" 2>&1
  $ncu -i "$O/st.$b.ncu-rep" --page source --print-source sass --csv > "$O/st.$b.sass.csv" 2> /dev/null; rm -f "$O/st.$b.ncu-rep"
  python3 tools/ncu_sass_hotspots.py "$O/st.$b.sass.csv" --top 20 > "$O/st.$b.hotspots.txt" 2>&1; rm -f "$O/st.$b.sass.csv"
  echo "ncu $b:"; grep -E "Duration|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued" "$O/st.$b.details.txt" | head -4
  sed -n '/^regions/,$p' "$O/st.$b.hotspots.txt" | head -8 | cut -c1-150
done
save
