#!/usr/bin/env bash
# Session 41, call A (bundle s41a = 3d895b8): first the FP8 / bf16 gated grouped GEMM tests that 3d895b8 changed
# (compiled, never run on a GPU in session 40); then, on an H200 only, every layer goal row of PERF.md beside its
# same-call baseline (session 40's s40d.sh, which five H200 requests never ran): DeepSeek-V3 layer 3 at 16K bf16 and
# native FP8 + --fp8-attention alternated around torch_layer_baseline.py; Kimi K3 layer 1 (KDA) and layer 3 (MLA)
# native FP8 and bf16 around torch.compile + fla chunk_kda; GLM-5.3 layer 6 at 16K and 65536 (native FP8, FP8
# indexer, fp8-accumulate) around torch's composition.
set -uo pipefail
NAME=s41a; O=/tmp/out.s41a; source tools/device_bundle_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s41a.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
timeout 120 "$P/bin/cuda_kernels_test" --gtest_filter='Fp8TmaTest.GroupedGemmGlu*:GroupedGemmDeviceTest.Glu*' \
  > "$O/gemm_test.log" 2>&1
echo "gated GEMM tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$O/gemm_test.log" | tr '\n' ' ')"
save
case "$gpu" in *H200*) ;; *) echo "not an H200 ($gpu): the layer rows stay for an H200 call"; exit 0 ;; esac
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
torch_layer() {  # MODEL TOKENS TIMEOUT
  PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout "$3" python3 tools/torch_layer_baseline.py --model "$1" \
    --configs "$P/configs" --tokens "$2" > "$O/torch.$1.$2.log" 2>&1
  echo "torch $1 $2 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.$1.$2.log"
}
for round in 1 2; do
  layer s41a dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant
  layer s41a dsv3f8.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  [ $round = 1 ] && torch_layer deepseek-v3 16384 120
done
save
layer s41a k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
layer s41a k3kdabf.1 kimi-k3.json 1:2 16384 --fp8-weights dequant
torch_layer kimi-k3-kda 16384 200
layer s41a k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
save
layer s41a k3mlaf8.1 kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention
layer s41a k3mlabf.1 kimi-k3.json 3:4 16384 --fp8-weights dequant
torch_layer kimi-k3-mla 16384 120
save
layer s41a glmf8.1 glm-5.3.json 6:7 16384 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
torch_layer glm-5.3 16384 120
save
[ "${SECONDS}" -lt 400 ] || exit 0
LAYER_REPS=5 LAYER_TIMEOUT=100 layer s41a glm64f8.1 glm-5.3.json 6:7 65536 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
torch_layer glm-5.3 65536 $((575 - SECONDS))
save
