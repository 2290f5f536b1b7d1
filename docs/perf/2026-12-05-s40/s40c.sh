#!/usr/bin/env bash
# Session 40, call C: the caching allocator under memory pressure (a cached block of up to twice the class serves a
# request cudaMalloc cannot, else only what the request needs is freed, not the whole cache) and the MoE layer's
# [n_rows, 2 I] gate_up scratch allocated only where the gated GEMM takes its unfused form (bundle s40c) against
# HEAD (bundle s40a), on the card call A ran on. Tests first: cuda_runtime_test (the allocator), the fused gated GEMMs'
# bit-exactness with and without the scratch; then layers alternated: Kimi K3 KDA with bf16 weights (74.8 GiB on an
# 80 GB H100 in call B: 116.6 ms against ~78 on an H200), K3 KDA FP8, DeepSeek-V3 bf16 / FP8, GLM-5.3 FP8.
set -uo pipefail
NAME=s40c; O=/tmp/out.s40c; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
timeout 120 $P/bin/cuda_runtime_test > $O/runtime_test.log 2>&1
echo "cuda_runtime_test rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $O/runtime_test.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Expected|Which is|actual" $O/runtime_test.log | head -12
timeout 200 $P/bin/cuda_kernels_test --gtest_filter='GroupedGemmDeviceTest.Glu*:Fp8TmaTest.GroupedGemmGlu*:MoeOp*:*Moe*' > $O/glu_test.log 2>&1
echo "glu tests rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $O/glu_test.log | tr '\n' ' '); $(grep -c '| PASS' $O/glu_test.log) PASS, $(grep -c '| FAIL' $O/glu_test.log) FAIL"
grep -E "^\[  FAILED|\| FAIL|Failure" $O/glu_test.log | head -8
save() { cd "$O" && tar czf "${OUT:-/tmp}/s40c.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
mem() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))[0]['device_mem_used_gib'],2), 'GiB')" "$1" 2>/dev/null; }
for round in 1 2; do
  for b in s40c s40a; do
    layer $b k3kdabf.$round kimi-k3.json 1:2 16384 --fp8-weights dequant; echo "   mem $(mem $O/k3kdabf.$round.$b.json)"
  done
done
save
for b in s40c s40a; do layer $b k3kdaf8 kimi-k3.json 1:2 16384 --fp8-weights native; echo "   mem $(mem $O/k3kdaf8.$b.json)"; done
for round in 1 2; do
  for b in s40c s40a; do
    layer $b dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant; echo "   mem $(mem $O/dsv3bf.$round.$b.json)"
    layer $b dsv3f8.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; echo "   mem $(mem $O/dsv3f8.$round.$b.json)"
  done
done
for b in s40c s40a; do layer $b glmf8 glm-5.3.json 6:7 16384 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate; echo "   mem $(mem $O/glmf8.$b.json)"; done
save
