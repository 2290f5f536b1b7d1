#!/usr/bin/env bash
# Session 56, call B (any GPU): the MoE shared expert on a side stream (kernels::Fork, kernels/fork.h), beside the
# router, the permutation and the routed experts, and GLM-5.3's selection-free sparse inputs beside its indexer. Bundle
# s56b: penstock_model_bench, cuda_runtime_test and penstock (stripped; pack_s56b_forward.sh).
#   1. ForkCudaTest (ordering across the streams, held frees, in line with a profiler);
#   2. tools/gpu_forward_check.py over the tracked variant checkpoints (tests/data/variants*: DeepSeek-V3 bf16 / FP8,
#      GLM-5.3 / V3.2 DSA on the sparse path, Kimi K3 latent MoE, KDA) with the side stream (the default) and with PENSTOCK_SIDE_STREAM=0, every case's logits
#      kept: the two runs' files must be byte for byte the same (the forks change no arithmetic);
#   3. layer A/Bs, PENSTOCK_SIDE_STREAM 0 / 1 interleaved: DeepSeek-V3 layer 3 at 16K bf16 (dequant) and native FP8 +
#      FP8 attention, 3 rounds; GLM-5.3 layer 6 at 16K native FP8 + FP8 indexer + fp8-accumulate, 2 rounds.
#   run: bash docs/perf/2026-12-07-s56/s56b.sh, carry build-dev-lead/s56b.tar.xz
set -uo pipefail
NAME=s56b; O=/tmp/out.s56b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s56b.tgz" --exclude=logits *.log *.json fc* 2>/dev/null; cd - > /dev/null; }
conformance "${P}/bin/cuda_runtime_test" 'ForkCudaTest.*:StreamTest.*' 120; save
for side in 1 0; do
  (
    KEEP_LOGITS=1 PENSTOCK_SIDE_STREAM=$side JOBS=16 PYTHONUNBUFFERED=1 timeout 200 python3 tools/gpu_forward_check.py \
      "${P}/bin/penstock" "$O/fc$side" tests/data/variants*/* > "$O/fc$side.log" 2>&1
    echo "forward check side=$side rc $? at ${SECONDS}s"
  )
  head -20 "$O/fc$side/forward_check_summary.md"
  save
done
# Bit for bit: every case's logits file with the side stream against the in-line run's.
same=0; differ=0
for f in "$O"/fc1/logits/*.safetensors; do
  if cmp -s "$f" "$O/fc0/logits/$(basename "$f")"; then same=$((same + 1)); else differ=$((differ + 1)); echo "differs: $(basename "$f")"; fi
done
echo "logits files identical with and without the side stream: ${same}, different: ${differ}"
rm -rf "$O"/fc*/logits
for r in 1 2 3; do
  for side in 0 1; do
    PENSTOCK_SIDE_STREAM=$side LAYER_REPS=6 layer s56b "dsv3bf.side$side.$r" deepseek-v3.json 3:4 16384 --fp8-weights dequant
    PENSTOCK_SIDE_STREAM=$side LAYER_REPS=6 layer s56b "dsv3f8.side$side.$r" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
    save
  done
done
for r in 1 2; do
  for side in 0 1; do
    PENSTOCK_SIDE_STREAM=$side LAYER_REPS=6 layer s56b "glm16.side$side.$r" glm-5.3.json 6:7 16384 --fp8-weights native \
      --dsa-fp8-indexer --dsa-fp8-accumulate
    save
  done
done
date -u
