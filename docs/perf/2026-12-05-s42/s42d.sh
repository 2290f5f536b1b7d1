#!/usr/bin/env bash
# Session 42, call D, NOT RUN (the session's device time was spent): bundle s42d = filter_row_packed_scan.patch applied
# (the stream top-k's streaming pass with one packed warp scan and one barrier per 4096-key chunk), beside s42b = the
# same code without it. The top-k conformance; the dsa bench, s42d then s42b; GLM-5.3 layer 6 at T 65536 (native FP8,
# FP8 indexer, fp8-accumulate), s42d / s42b / s42d. To run it: git apply the patch, build, pack s42d with a baseline
# bundle of the tree without it (tools/pack_session_bundle.sh build-cuda s42d "..." s42b).
set -uo pipefail
NAME=s42d; O=/tmp/out.s42d; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s42d.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
timeout 60 "$P/bin/cuda_kernels_test" --gtest_filter='DsaOpTest.Topk*' > "$O/conf.log" 2>&1
echo "top-k conformance rc $?: $(grep -c 'PASS$' "$O/conf.log") PASS lines, $(grep -c 'FAIL' "$O/conf.log") FAIL"
save
for b in s42d s42b; do
  timeout 60 "/tmp/s/$b/bin/penstock_bench_kernels" --only dsa --warmup 1 --reps 3 > "$O/dsa.$b.jsonl" 2>&1
  echo "dsa bench $b rc $? at ${SECONDS}s"
  python3 tools/dsa_topk_lines.py "$O/dsa.$b.jsonl" | grep -E "^T 65536|prefix 114688"
  save
done
for b in s42d s42b s42d; do
  LAYER_REPS=5 LAYER_TIMEOUT=40 layer $b glm64.$b.$SECONDS glm-5.3.json 6:7 65536 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
  save
done
