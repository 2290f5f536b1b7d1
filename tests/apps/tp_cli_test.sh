#!/usr/bin/env bash
# `penstock forward` under mpirun with tensor / expert / context parallelism (and PP x TP, PP x CP, TP x CP): logits
# equal the single-process run within 1e-4 (every position, argmax identical) for every family fixture, whole and
# chunked prompts, uneven head / expert / row splits; an invalid layout fails on every rank with exit code 2.
# usage: tp_cli_test.sh PENSTOCK MPIEXEC FIXTURES_DIR LOGITS_DIFF
set -euo pipefail
bin=$1; mpiexec=$2; fixtures=$3; diff=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_mpi_yield_when_idle=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ids=$(python3 -c "print(','.join(str((i * 37 + 11) % 128) for i in range(150)))")
k3=$(dirname "$0")/../data/variants_k3
run_case() {  # model chunk np layout-args...
  local model=$1 chunk=$2 np=$3; shift 3
  local ref="$tmp/ref_$(basename "$model")_$chunk.safetensors"
  [ -f "$ref" ] || "$bin" forward --model "$model" --input-ids "$ids" --chunk-size "$chunk" --threads 1 --out "$ref" >/dev/null
  if ! log=$(timeout 180 "$mpiexec" --oversubscribe -np "$np" "$bin" forward --model "$model" --input-ids "$ids" \
      --chunk-size "$chunk" --threads 1 "$@" --out "$tmp/par.safetensors" 2>&1); then
    echo "FAIL: $(basename "$model") chunk=$chunk $* exited non-zero:"; tail -20 <<<"$log"; exit 1
  fi
  if ! res=$("$diff" "$ref" "$tmp/par.safetensors" 1e-4); then
    echo "FAIL: $(basename "$model") chunk=$chunk $* : $res"; exit 1
  fi
  echo "ok: $(basename "$model") chunk=$chunk $* : $res"
}
for m in deepseek_v3_tiny glm_moe_dsa_tiny kimi_linear_tiny; do
  run_case "$fixtures/$m" 0 2 --tp 2
  run_case "$fixtures/$m" 17 2 --tp 2 --ep 2
  run_case "$fixtures/$m" 64 4 --pp 2 --tp 2
  run_case "$fixtures/$m" 0 2 --cp 2
  run_case "$fixtures/$m" 17 3 --cp 3                            # 17-row chunks over 3 ranks (6,6,5)
  run_case "$fixtures/$m" 64 4 --pp 2 --cp 2
done
run_case "$fixtures/deepseek_v3_tiny" 5 4 --tp 2 --cp 2 --mla-form absorbed
run_case "$fixtures/deepseek_v3_tiny_fp8" 0 2 --tp 2 --ep 2
run_case "$fixtures/deepseek_v3_tiny" 5 4 --tp 4 --ep 4        # 2 experts per rank
run_case "$fixtures/deepseek_v3_tiny" 0 4 --tp 4 --ep 2        # experts split 2 ways, each expert's columns 2 ways
run_case "$fixtures/deepseek_v3_tiny" 17 3 --tp 3              # 4 heads over 3 ranks (2,1,1), vocab 512 padded to 171
data=$(dirname "$0")/../data
run_case "$data/variants_dsa/glm_h3_freq_topk8_sharded" 17 4 --tp 2 --cp 2   # 3 heads, sparse top-8, sharded
run_case "$data/variants_dsa/v32_yarn_groups" 0 2 --tp 2 --ep 2              # V3.2: YaRN, n_group > 1
# CP-native DSA: the top-k crosses a cut at a shared indexer layer (layers 2 and 4 of the freq-2 pattern) as each
# cp rank's own rows.
run_case "$data/variants_dsa/glm_h3_freq_topk8_sharded" 17 4 --pp 2 --cp 2 --pp-layer-partition 2,4
run_case "$data/variants_dsa/glm_h3_freq_topk8_sharded" 0 6 --pp 2 --cp 3 --pp-layer-partition 4,2
run_case "$data/variants_dsa/glm_pattern_topk24" 17 3 --cp 3
run_case "$data/variants_kda/kda_h3_qlora_layers" 5 2 --tp 2                 # 3 KDA heads split 2 + 1
run_case "$data/variants_kda/kda_conv3_sharded" 0 4 --cp 2 --tp 2
for d in "$k3"/*/; do
  run_case "$d" 7 2 --tp 2 --ep 2                               # 3 MLA heads, 2 or 3 KDA heads, latent MoE
  run_case "$d" 0 4 --pp 2 --tp 2 --pp-eager-bank-forward
  run_case "$d" 13 2 --cp 2
done

# tp % ep != 0 is refused on every rank with exit code 2.
set +e
out=$(timeout 60 "$mpiexec" --oversubscribe -np 2 "$bin" forward --model "$fixtures/deepseek_v3_tiny" --input-ids 1,2,3 \
      --tp 2 --ep 4 2>&1)
rc=$?
set -e
if [ "$rc" -ne 2 ] || ! grep -q "tp_size % ep_size\|must divide\|divisible" <<<"$out"; then
  echo "FAIL: --tp 2 --ep 4 gave rc=$rc: $out"; exit 1
fi
echo "ok: --tp 2 --ep 4 refused with exit code 2"
