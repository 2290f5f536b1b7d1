#!/usr/bin/env bash
# Multi-GPU check for a machine with 2 GPUs (docs/perf/2026-11-30-nccl-pp-tp.md): the NCCL communicator test under
# `mpirun -np 2`, then `penstock forward --backend cuda` (fp32) on one GPU against `mpirun -np 2 ... --pp 2`, `--tp 2`
# and `--tp 2 --ep 2` (one GPU per rank = local rank; NCCL tp/pp groups), every position's logits compared with
# logits_diff. Families without a CUDA path (the single-GPU run answers Unimplemented) are reported as skipped.
#   OUT=/tmp/o BIN=build-h4 FIXTURES=../shared/fixtures tools/gpu_multi_check.sh
#   BIN holds penstock, logits_diff and nccl_communicator_test; MPIRUN (default mpirun), TOL (default 1e-4),
#   CASE_TIMEOUT (seconds per launch, default 90).
# Writes $OUT/gpu_multi_check.md (table) and $OUT/gpu_multi_check.log; exit status 1 when any case fails.
set -uo pipefail
OUT="${OUT:-./out}"
BIN="${BIN:?BIN: folder with penstock, logits_diff, nccl_communicator_test}"
FIXTURES="${FIXTURES:?FIXTURES: the shared fixtures folder}"
MPIRUN="${MPIRUN:-mpirun}"
TOL="${TOL:-1e-4}"
mkdir -p "${OUT}"
OUT="$(cd "${OUT}" && pwd)"
LOG="${OUT}/gpu_multi_check.log"
REPORT="${OUT}/gpu_multi_check.md"
: >"${LOG}"
# NVLink multicast stays off on shared hosts (KINDS.md); every rank inherits these.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi2() { timeout "${CASE_TIMEOUT:-90}" "${MPIRUN}" --oversubscribe -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$@"; }
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
failures=0
{
  echo "# penstock gpu_multi_check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
  nvidia-smi topo -m 2>/dev/null | head -4 || true
  "${MPIRUN}" --version 2>/dev/null | head -1
} >>"${LOG}" 2>&1

echo "+ nccl_communicator_test under mpirun -np 2" >>"${LOG}"
if mpi2 "${BIN}/nccl_communicator_test" >>"${LOG}" 2>&1; then
  nccl_result="passed"
else
  nccl_result="FAILED"
  failures=$((failures + 1))
fi
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|^\[  FAILED" "${LOG}" | tail -8 >"${tmp}/nccl_summary" || true

ids=$(seq -s, 0 63 | awk -F, '{for (i = 1; i <= NF; ++i) printf "%s%d", (i > 1 ? "," : ""), ($i * 37 + 11) % 256}')
ids_long="${ids},${ids},${ids}"  # 192 tokens
rows=()
run_case() {  # model chunk ids-name extra-args...; the layout args (--pp/--tp/--ep) follow
  local model=$1 chunk=$2 idsname=$3; shift 3
  local input="${ids}"
  [ "${idsname}" = long ] && input="${ids_long}"
  local name; name=$(basename "${model}")
  local ref="${tmp}/ref_${name}_${chunk}_${idsname}.safetensors"
  local common=(forward --model "${model}" --backend cuda --dtype float32 --input-ids "${input}" --chunk-size "${chunk}")
  [ -f "${ref}.missing" ] && return
  if [ ! -f "${ref}" ]; then
    echo "+ penstock ${common[*]} (single GPU)" >>"${LOG}"
    if ! timeout "${CASE_TIMEOUT:-90}" "${BIN}/penstock" "${common[@]}" --out "${ref}" >>"${LOG}" 2>&1; then
      if tail -1 "${LOG}" | grep -q -i "unimplemented\|not yet on CUDA\|no CUDA"; then
        rows+=("| ${name} | single GPU | ${chunk} | ${idsname} | - | - | skipped: no CUDA path |")
      else
        rows+=("| ${name} | single GPU | ${chunk} | ${idsname} | - | - | FAILED (see log) |")
        failures=$((failures + 1))
      fi
      touch "${ref}.missing"
      return
    fi
  fi
  echo "+ mpirun -np 2 penstock ${common[*]} $*" >>"${LOG}"
  local t0; t0=$(date +%s.%N)
  if ! mpi2 "${BIN}/penstock" "${common[@]}" "$@" --out "${tmp}/par.safetensors" >>"${LOG}" 2>&1; then
    rows+=("| ${name} | $* | ${chunk} | ${idsname} | - | - | FAILED to run (see log) |")
    failures=$((failures + 1))
    return
  fi
  local secs; secs=$(awk -v a="${t0}" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  local res
  if res=$("${BIN}/logits_diff" "${ref}" "${tmp}/par.safetensors" "${TOL}"); then
    status="ok"
  else
    status="FAILED"
    failures=$((failures + 1))
  fi
  echo "${res}" >>"${LOG}"
  local d m
  d=$(awk '{print $2}' <<<"${res}")
  m=$(awk '{print $4}' <<<"${res}")
  rows+=("| ${name} | $* | ${chunk} | ${idsname} | ${d} | ${m} | ${status} ($(printf '%.1f' "${secs}") s) |")
}

dsv3="${FIXTURES}/deepseek_v3_tiny"
for chunk in 0 17; do
  run_case "${dsv3}" "${chunk}" short --pp 2
  run_case "${dsv3}" "${chunk}" short --tp 2
  run_case "${dsv3}" "${chunk}" short --tp 2 --ep 2
done
run_case "${dsv3}" 64 long --pp 2 --concurrency 4 --pp-async-batch-depth 1
run_case "${dsv3}" 64 long --tp 2
run_case "${dsv3}" 0 long --tp 2 --ep 2
run_case "${FIXTURES}/deepseek_v3_tiny_fp8" 17 short --tp 2 --ep 2
run_case "${FIXTURES}/deepseek_v3_tiny_fp8" 17 short --pp 2
for fam in glm_moe_dsa_tiny kimi_linear_tiny; do
  run_case "${FIXTURES}/${fam}" 0 short --pp 2
  run_case "${FIXTURES}/${fam}" 0 short --tp 2
done

{
  echo "# gpu_multi_check: penstock forward --backend cuda (fp32), mpirun -np 2 vs one GPU"
  echo
  echo "- date: $(date -u +%Y-%m-%d); GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs)"
  echo "- tolerance ${TOL} (logits_diff: max |diff| over every position, argmax agreement outside near-ties)"
  echo "- nccl_communicator_test (mpirun -np 2): ${nccl_result}"
  sed 's/^/    /' "${tmp}/nccl_summary"
  echo "- prompts: short = 64 ids, long = 192 ids ((i * 37 + 11) mod 256); chunk 0 = whole prompt"
  echo
  echo "| model | layout | chunk | prompt | max abs diff | argmax mismatches | result |"
  echo "|---|---|---|---|---|---|---|"
  for r in "${rows[@]}"; do echo "${r}"; done
  echo
  echo "failures: ${failures}"
} >"${REPORT}"
cat "${REPORT}"
[ "${failures}" -eq 0 ]
