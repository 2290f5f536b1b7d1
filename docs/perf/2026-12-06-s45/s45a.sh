#!/usr/bin/env bash
# Session 45, call A: bundle s45a = b0f7e27 + the KDA split form's bf16 prep kernel (two 16-warp CTAs per SM,
# bf16 operands on m16n8k16, the solve transposed in registers) as the default; PENSTOCK_KDA_PREP=tf32 runs the
# previous prep kernel in the same binary. The delta-rule conformance (bf16 prep, then tf32 prep); the kda bench
# bf16 / tf32 interleaved three times at 4K, 16K, 64K; both phase profiles; fla chunk_kda bf16 in the same call;
# Kimi K3 layer 1 (KDA) native FP8 at 16K, bf16 / tf32 / bf16.
set -uo pipefail
NAME=s45a; O=/tmp/out.s45a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s45a.tgz" *.log *.json *.jsonl *.txt 2>/dev/null; cd - > /dev/null; }
timeout 150 "$P/bin/cuda_kernels_test" --gtest_filter='KdaOpTest.DeltaRule*' > "$O/conf.bf16.log" 2>&1
echo "conformance (bf16 prep) rc $?: $(grep -c 'PASS$' "$O/conf.bf16.log") PASS lines, $(grep -c 'FAIL' "$O/conf.bf16.log") FAIL"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$O/conf.bf16.log"; grep -B2 -A6 -m3 "FAIL" "$O/conf.bf16.log" | cut -c1-400
grep "_split" "$O/conf.bf16.log" | grep -v "^\[" | head -30 | cut -c1-250
save
grep -q "^\[  PASSED  \] 4 tests" "$O/conf.bf16.log" || { echo "bf16 prep not conformant: stopping"; exit 0; }
PENSTOCK_KDA_PREP=tf32 timeout 150 "$P/bin/cuda_kernels_test" --gtest_filter='KdaOpTest.DeltaRuleChunkSplit*' > "$O/conf.tf32.log" 2>&1
echo "conformance (tf32 prep, split) rc $?: $(grep -c 'PASS$' "$O/conf.tf32.log") PASS lines"
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96,65536:96
for v in bf16 tf32 bf16 tf32 bf16 tf32; do
  PENSTOCK_KDA_PREP=$v timeout 90 "$P/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.$v.$SECONDS.jsonl" 2>&1
  echo "kda bench $v rc $? at ${SECONDS}s"; kda_split_lines "$(ls -t $O/kda.$v.*.jsonl | head -1)" $v
  save
done
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
for v in bf16 tf32; do
  PENSTOCK_KDA_PREP=$v PENSTOCK_KDA_TC_PROFILE=1 timeout 60 "$P/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 2 > "$O/kda.profile.$v.log" 2>&1
  echo "kda profile $v rc $?"; grep "kda_split" "$O/kda.profile.$v.log" | tail -1
done
save
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
PENSTOCK_FLA_CASES=bf16 PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout 150 python3 tools/fla_kda_baseline.py 4096 16384 65536 > "$O/fla.jsonl" 2> "$O/fla.err.log"
echo "fla rc $? at ${SECONDS}s"; cut -c1-300 "$O/fla.jsonl"
save
for v in bf16 tf32 bf16; do
  PENSTOCK_KDA_PREP=$v LAYER_REPS=5 LAYER_TIMEOUT=70 layer s45a k3kda.$v.$SECONDS kimi-k3.json 1:2 16384 --fp8-weights native
done
save
