#!/usr/bin/env bash
# Session 61, call 5 (any GPU; not run in session 61: no device time left): the e4m3 indexer logits kernel's
# epilogue forms (WgmmaIndexerOptions::epilogue: kChains2 = the default, kChains4, kChains4FaddAbs, kChains2FaddAbs),
# bundle pfI (the landed forms, all in one binary): DsaOpTest.IndexerLogitsCausal* conformance (the test with the
# forms' modes; stop on failure), the kernel bench's interleaved A/B at T 16384 / 65536 (PENSTOCK_DSA_EPI_AB=1),
# then the GLM-5.3 layer at 64K with PENSTOCK_DSA_FP8_EPILOGUE=0 / 2 / 3, two rounds.
#   run: bash docs/perf/2026-12-08-s61/c5.sh, carry build-dev-lead/pfI.tar.xz
set -uo pipefail
NAME=pfI; O=/tmp/out.c5; source tools/device_bundle_env.sh
save() { cd "$O" && tar czf "${OUT:-/tmp}/c5.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
conformance "$P/bin/cuda_kernels_test" 'DsaOpTest.IndexerLogitsCausal*' 120 || { grep -E "Failure|FAILED|differ" -A3 "$O/conf.log" | head -30; save; exit 0; }
grep -E "kChains" "$O/conf.log" | head -6
PENSTOCK_DSA_EPI_AB=1 timeout 150 "$P/bin/penstock_bench_kernels" --only dsa > "$O/epi.jsonl" 2> "$O/epi.err"
echo "epi bench rc $? at ${SECONDS}s"; save
python3 - "$O/epi.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith('{') and 'epilogue' in line:
        r = json.loads(line)
        print(r['tokens'], r['round'], f"{r['variant']:18s}", round(r['ms'], 3), round(r['tflops'], 1),
              r['sample_values_fadd_abs_differ_from_chains4'], r['sample_values_chains2_fadd_abs_differ_from_chains2'],
              r['sample_max_abs_chains4_vs_chains2'])
PY
for r in 1 2; do for e in 0 2 3; do
  PENSTOCK_DSA_FP8_EPILOGUE=$e LAYER_REPS=5 LAYER_TIMEOUT=90 layer pfI "glm65536.e$e.$r" glm-5.3.json 6:7 65536 \
    --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
done; save; done
date -u
