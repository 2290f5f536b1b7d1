#!/usr/bin/env bash
# Session 43, call A: bundle s43d = f5428e7 + session 42's filter_row_packed_scan.patch (the stream top-k's streaming
# pass with one packed warp scan and one barrier per 4096-key chunk), beside s43b = f5428e7. The top-k conformance
# (with f5428e7's 400000-key cases, their first GPU run); the dsa bench, s43d then s43b; GLM-5.3 layer 6 at T 65536
# (native FP8, FP8 indexer, fp8-accumulate), s43d / s43b / s43d. Then the KDA split form at Kimi K3 dims: the kda
# bench (and its per-phase developer profile), Nsight Compute on the prep and state kernels at 16K, and fla's
# chunk_kda (bf16, f32) at the same shapes.
set -uo pipefail
NAME=s43d; O=/tmp/out.s43a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s43a.tgz" *.log *.json *.jsonl *.txt 2>/dev/null; cd - > /dev/null; }
timeout 90 "$P/bin/cuda_kernels_test" --gtest_filter='DsaOpTest.Topk*' > "$O/conf.log" 2>&1
echo "top-k conformance rc $?: $(grep -c 'PASS$' "$O/conf.log") PASS lines, $(grep -c 'FAIL' "$O/conf.log") FAIL"
grep -E "^\[  (PASSED|FAILED)" "$O/conf.log"
save
for b in s43d s43b; do
  timeout 60 "/tmp/s/$b/bin/penstock_bench_kernels" --only dsa --warmup 1 --reps 3 > "$O/dsa.$b.jsonl" 2>&1
  echo "dsa bench $b rc $? at ${SECONDS}s"
  python3 tools/dsa_topk_lines.py "$O/dsa.$b.jsonl" | grep -E "^T 65536|prefix 114688|prefix 49152"
  save
done
for b in s43d s43b s43d; do
  LAYER_REPS=5 LAYER_TIMEOUT=40 layer $b glm64.$b.$SECONDS glm-5.3.json 6:7 65536 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
  save
done
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96
timeout 90 "$P/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.jsonl" 2>&1
echo "kda bench rc $? at ${SECONDS}s"; python3 -c "
import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{') and '\"kda_delta_rule\"' in l:
        r=json.loads(l); print(r['tokens'], r['variant'], round(r['ms'],3), r.get('max_abs_diff_vs_recurrent_16rows'))
" "$O/kda.jsonl"
PENSTOCK_KDA_TC_PROFILE=1 timeout 60 "$P/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 2 > "$O/kda.profile.log" 2>&1
echo "kda profile rc $?"; grep -i -E "phase|prep|state" "$O/kda.profile.log" | head -20
save
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
NCU_TIMEOUT=150 ncu_sass kdaprep delta_rule_prep_kernel "$P/bin/penstock_bench_kernels" --only kda --warmup 0 --reps 1
save
NCU_TIMEOUT=120 ncu_sass kdastate delta_rule_state_kernel "$P/bin/penstock_bench_kernels" --only kda --warmup 0 --reps 1
save
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout 150 python3 tools/fla_kda_baseline.py 4096 16384 > "$O/fla.jsonl" 2> "$O/fla.err.log"
echo "fla rc $? at ${SECONDS}s"; cat "$O/fla.jsonl" | cut -c1-300
save
