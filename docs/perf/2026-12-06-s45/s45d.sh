#!/usr/bin/env bash
# Session 45, call D: bundle s45d = bea9d2b + the bf16 prep kernel's g, k, q and v loads unconditional (clamped
# addresses, masked after: Nsight showed each conditional q load compiled as a load-use pair, 16 serial latencies,
# ~29% of the stall samples), beside s45a (bea9d2b). Conformance (all delta-rule tests) on s45d; the kda bench
# s45d / s45a three times; the phase profiles; Nsight's headline for s45d's prep kernel; fla chunk_kda bf16 in the same
# call; Kimi K3 layer 1 (KDA) native FP8 at 16K, s45d / s45a / s45d.
set -uo pipefail
NAME=s45d; O=/tmp/out.s45d; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s45d.tgz" *.log *.json *.jsonl *.txt 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" 'KdaOpTest.DeltaRule*' 150 || { save; echo "conformance did not pass: stopping"; exit 0; }
save
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96,65536:96
for b in s45d s45a s45d s45a s45d s45a; do
  timeout 90 "/tmp/s/$b/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.$b.$SECONDS.jsonl" 2>&1
  echo "kda bench $b rc $? at ${SECONDS}s"; kda_split_lines "$(ls -t $O/kda.$b.*.jsonl | head -1)" $b
done
save
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
for b in s45d s45a; do
  PENSTOCK_KDA_TC_PROFILE=1 timeout 60 "/tmp/s/$b/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 2 > "$O/kda.profile.$b.log" 2>&1
  echo "kda profile $b rc $?"; grep "kda_split" "$O/kda.profile.$b.log" | tail -1
done
ncu=/usr/local/cuda/bin/ncu
timeout 120 $ncu --clock-control none -k regex:prep_bf16 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
  --section SourceCounters -o "$O/p2d" "$P/bin/penstock_bench_kernels" --only kda --warmup 0 --reps 1 > "$O/p2d.ncu.log" 2>&1
$ncu -i "$O/p2d.ncu-rep" --page details > "$O/p2d.details.txt" 2>&1
$ncu -i "$O/p2d.ncu-rep" --page source --print-source sass --csv > "$O/p2d.sass.csv" 2> /dev/null; rm -f "$O/p2d.ncu-rep"
python3 tools/ncu_sass_hotspots.py "$O/p2d.sass.csv" --top 12 > "$O/p2d.hotspots.txt" 2>&1; rm -f "$O/p2d.sass.csv"
grep -E "Duration|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued" "$O/p2d.details.txt" | head -5
sed -n '/^regions/,$p' "$O/p2d.hotspots.txt" | head -10 | cut -c1-150
save
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
PENSTOCK_FLA_CASES=bf16 PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout 150 python3 tools/fla_kda_baseline.py 4096 16384 65536 > "$O/fla.jsonl" 2> "$O/fla.err.log"
echo "fla rc $? at ${SECONDS}s"; python3 -c "
import json
for l in open('$O/fla.jsonl'): r=json.loads(l); print('fla bf16', r['tokens'], round(r['ms'],3))"
save
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s45d k3kda.1 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s45a k3kda.2 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 LAYER_TIMEOUT=70 layer s45d k3kda.3 kimi-k3.json 1:2 16384 --fp8-weights native
save
