#!/usr/bin/env bash
# `penstock forward --pp N` under mpirun: logits bit-identical to the single-process run for every family fixture,
# explicit and balanced partitions, chunked, and the token the last stage sampled is their argmax; bad partitions fail
# on every rank with exit code 2 (no hang).
# usage: pp_cli_test.sh PENSTOCK MPIEXEC FIXTURES_DIR
set -euo pipefail
bin=$1; mpiexec=$2; fixtures=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# mpirun binds each rank to a core, so OpenBLAS runs one thread per rank there and as many as there are cores in the
# one-process run; on some CPUs (a 2-core AMD EPYC VM, OpenBLAS 0.3.21) its sgemm rounds differently with another
# thread count. The test is about the pipeline's bit-identity, so both sides run OpenBLAS single-threaded.
export OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ids=$(python3 -c "print(','.join(str((i * 37 + 11) % 256) for i in range(150)))")
run_case() {  # model np chunk partition
  local model=$1 np=$2 chunk=$3 part=$4
  "$bin" forward --model "$fixtures/$model" --input-ids "$ids" --chunk-size "$chunk" --out "$tmp/ref.safetensors" >/dev/null
  local extra=()
  [ -n "$part" ] && extra=(--pp-layer-partition "$part")
  timeout 120 "$mpiexec" --oversubscribe -np "$np" "$bin" forward --model "$fixtures/$model" --input-ids "$ids" \
      --chunk-size "$chunk" --pp "$np" "${extra[@]}" --out "$tmp/pp.safetensors" >"$tmp/pp.log"
  if ! cmp -s "$tmp/ref.safetensors" "$tmp/pp.safetensors"; then
    echo "FAIL: $model pp=$np chunk=$chunk partition='$part' differs from the single-process logits"; exit 1
  fi
  # The last stage sampled the next token itself (greedy): the argmax of the last position's logits.
  local argmax sampled
  argmax=$(grep -o "last position: argmax [0-9]*" "$tmp/pp.log" | grep -o "[0-9]*$")
  sampled=$(grep -o "last stage sampled (greedy): token [0-9]*" "$tmp/pp.log" | grep -o "[0-9]*$")
  if [ -z "$argmax" ] || [ "$argmax" != "$sampled" ]; then
    echo "FAIL: $model pp=$np: the last stage sampled '$sampled', the logits' argmax is '$argmax'"; exit 1
  fi
  echo "ok: $model pp=$np chunk=$chunk partition='${part:-balanced}' bit-identical, last stage sampled $sampled"
}
run_case deepseek_v3_tiny 2 0 ""
run_case deepseek_v3_tiny 4 17 "1,1,1,1"
run_case deepseek_v3_tiny 3 64 "2,1,1"
run_case glm_moe_dsa_tiny 3 5 "1,2,3"  # stages start at full indexer layers (0, 1, 3)
run_case glm_moe_dsa_tiny 2 0 "3,3"
run_case glm_moe_dsa_tiny 3 17 "2,1,3"  # stage 1 starts at shared layer 2: the top-k travels with the hidden
run_case glm_moe_dsa_tiny 4 0 "1,1,3,1"   # stage 1 at full layer 1, stage 3 at shared layer 5
run_case glm_moe_dsa_tiny 2 5 ""          # balanced, wherever the cut falls
run_case kimi_linear_tiny 2 17 ""
run_case kimi_linear_tiny 3 5 "3,2,3"
run_case kimi_linear_tiny 4 64 ""
k3=$(dirname "$0")/../data/variants_k3
for d in "$k3"/*/; do run_case "$(realpath --relative-to="$fixtures" "$d")" 3 7 ""; done

# A partition that does not add up fails on every rank, exit code 2, one error line per rank.
set +e
out=$(timeout 60 "$mpiexec" --oversubscribe -np 2 "$bin" forward --model "$fixtures/deepseek_v3_tiny" --input-ids 1,2,3 \
      --pp 2 --pp-layer-partition 3,3 2>&1)
rc=$?
set -e
if [ "$rc" -ne 2 ] || ! grep -q "sums to 6 layers, the model has 4" <<<"$out"; then
  echo "FAIL: bad partition gave rc=$rc: $out"; exit 1
fi
echo "ok: bad partition rejected with exit code 2"

# Two-ended settings (ranks launched with different flags, MPMD): a stage-0-wins setting is overridden with a warning
# and the logits stay bit-identical to the single-process run; a fatal one (another model) fails every rank, exit 2.
"$bin" forward --model "$fixtures/deepseek_v3_tiny" --input-ids "$ids" --out "$tmp/ref.safetensors" >/dev/null
out=$(timeout 120 "$mpiexec" --oversubscribe -np 1 "$bin" forward --model "$fixtures/deepseek_v3_tiny" --input-ids "$ids" \
      --pp 2 --out "$tmp/pp.safetensors" : -np 1 "$bin" forward --model "$fixtures/deepseek_v3_tiny" \
      --input-ids "$ids" --pp 2 --mla-form absorbed 2>&1)
if ! grep -q "setting --mla-form differs from stage 0's" <<<"$out" || ! cmp -s "$tmp/ref.safetensors" "$tmp/pp.safetensors"; then
  echo "FAIL: stage-0-wins setting: $out"; exit 1
fi
echo "ok: --mla-form mismatch: stage 0 wins with a warning, logits bit-identical"
# mpirun aborts the job when the first rank exits non-zero, which can cut the other rank's line; so the exit code is
# checked on one run and "every stage refuses" on a second whose ranks all run to their end (mpirun then exits 0).
set +e
out=$(timeout 60 "$mpiexec" --oversubscribe -np 1 "$bin" forward --model "$fixtures/deepseek_v3_tiny" --input-ids 1,2,3 \
      --pp 2 : -np 1 "$bin" forward --model "$fixtures/glm_moe_dsa_tiny" --input-ids 1,2,3 --pp 2 2>&1)
rc=$?
both=$(timeout 60 "$mpiexec" --mca orte_abort_on_non_zero_status 0 --oversubscribe -np 1 "$bin" forward \
       --model "$fixtures/deepseek_v3_tiny" --input-ids 1,2,3 --pp 2 : -np 1 "$bin" forward \
       --model "$fixtures/glm_moe_dsa_tiny" --input-ids 1,2,3 --pp 2 2>&1)
set -e
if [ "$rc" -ne 2 ] || ! grep -q 'setting --model (type, hidden size, layers, vocab) differs' <<<"$out" ||
   [ "$(grep -c 'setting --model (type, hidden size, layers, vocab) differs' <<<"$both")" -ne 2 ]; then
  echo "FAIL: fatal setting mismatch gave rc=$rc: $out / every rank: $both"; exit 1
fi
echo "ok: --model mismatch refused on every stage, naming the setting, exit code 2"

# --dsa-fp8-indexer reaches the model: on GLM with a prompt past index_topk the logits differ from the f32 indexer's;
# PP2 with the flag is bit-identical to one process with it, also when only stage 0 passes it (stage 0 wins, warned).
long_ids=$(seq -s, 3 2 161)
"$bin" forward --model "$fixtures/glm_moe_dsa_tiny" --input-ids "$long_ids" --out "$tmp/f32idx.safetensors" >/dev/null
"$bin" forward --model "$fixtures/glm_moe_dsa_tiny" --input-ids "$long_ids" --dsa-fp8-indexer \
  --out "$tmp/fp8idx.safetensors" >/dev/null
if cmp -s "$tmp/f32idx.safetensors" "$tmp/fp8idx.safetensors"; then
  echo "FAIL: --dsa-fp8-indexer left the logits unchanged"; exit 1
fi
out=$(timeout 120 "$mpiexec" --oversubscribe -np 1 "$bin" forward --model "$fixtures/glm_moe_dsa_tiny" \
      --input-ids "$long_ids" --pp 2 --pp-layer-partition 2,4 --dsa-fp8-indexer --out "$tmp/fp8idx_pp.safetensors" \
      : -np 1 "$bin" forward --model "$fixtures/glm_moe_dsa_tiny" --input-ids "$long_ids" --pp 2 \
      --pp-layer-partition 2,4 2>&1)
if ! grep -q "setting --dsa-fp8-indexer differs from stage 0's" <<<"$out" ||
   ! cmp -s "$tmp/fp8idx.safetensors" "$tmp/fp8idx_pp.safetensors"; then
  echo "FAIL: --dsa-fp8-indexer under PP2: $out"; exit 1
fi
echo "ok: --dsa-fp8-indexer changes the GLM logits; PP2 (stage 0 wins) bit-identical to one process"

# --dsa-fp8-accumulate is accepted by forward (one process and PP2, two-ended: stage 0 wins, warned) and leaves the CPU's
# exact logits unchanged (it only lets a GPU sum in fp8 tensor-core instructions).
"$bin" forward --model "$fixtures/glm_moe_dsa_tiny" --input-ids "$long_ids" --dsa-fp8-indexer --dsa-fp8-accumulate \
  --out "$tmp/fp8acc.safetensors" >/dev/null
out=$(timeout 120 "$mpiexec" --oversubscribe -np 1 "$bin" forward --model "$fixtures/glm_moe_dsa_tiny" \
      --input-ids "$long_ids" --pp 2 --pp-layer-partition 2,4 --dsa-fp8-indexer --dsa-fp8-accumulate \
      --out "$tmp/fp8acc_pp.safetensors" : -np 1 "$bin" forward --model "$fixtures/glm_moe_dsa_tiny" \
      --input-ids "$long_ids" --pp 2 --pp-layer-partition 2,4 --dsa-fp8-indexer 2>&1)
if ! cmp -s "$tmp/fp8idx.safetensors" "$tmp/fp8acc.safetensors" ||
   ! grep -q "setting --dsa-fp8-accumulate differs from stage 0's" <<<"$out" ||
   ! cmp -s "$tmp/fp8idx.safetensors" "$tmp/fp8acc_pp.safetensors"; then
  echo "FAIL: --dsa-fp8-accumulate on the CPU: $out"; exit 1
fi
rc=0; out=$("$bin" forward --model "$fixtures/glm_moe_dsa_tiny" --input-ids "$long_ids" --dsa-fp8-accumulate 2>&1) || rc=$?
if [ "$rc" -ne 2 ] || ! grep -q -- "--dsa-fp8-accumulate needs --dsa-fp8-indexer" <<<"$out"; then
  echo "FAIL: --dsa-fp8-accumulate without --dsa-fp8-indexer gave rc=$rc: $out"; exit 1
fi
echo "ok: --dsa-fp8-accumulate accepted (PP2: stage 0 wins), the CPU's logits unchanged; alone refused (exit 2)"

# --fp8-attention reaches the MLA MHA form: DeepSeek-V3's logits move; PP2 with the flag only on stage 0 (stage 0
# wins, warned) is bit-identical to one process with it.
dsv3="$fixtures/deepseek_v3_tiny"
"$bin" forward --model "$dsv3" --input-ids "$ids" --out "$tmp/bf.safetensors" >/dev/null
"$bin" forward --model "$dsv3" --input-ids "$ids" --fp8-attention --out "$tmp/fp8attn.safetensors" >/dev/null
if cmp -s "$tmp/bf.safetensors" "$tmp/fp8attn.safetensors"; then
  echo "FAIL: --fp8-attention left the logits unchanged"; exit 1
fi
out=$(timeout 120 "$mpiexec" --oversubscribe -np 1 "$bin" forward --model "$dsv3" --input-ids "$ids" --pp 2 \
      --fp8-attention --out "$tmp/fp8attn_pp.safetensors" : -np 1 "$bin" forward --model "$dsv3" --input-ids "$ids" \
      --pp 2 2>&1)
if ! grep -q "setting --fp8-attention differs from stage 0's" <<<"$out" ||
   ! cmp -s "$tmp/fp8attn.safetensors" "$tmp/fp8attn_pp.safetensors"; then
  echo "FAIL: --fp8-attention under PP2: $out"; exit 1
fi
echo "ok: --fp8-attention changes the DeepSeek-V3 logits; PP2 (stage 0 wins) bit-identical to one process"

# Kimi K3 (AttnRes bank) with eager bank forwarding on and off: both bit-identical to the single-process run; the
# per-stage counters report the bank bytes, which are the same both ways.
for d in "$k3"/*/; do
  "$bin" forward --model "$d" --input-ids "$ids" --chunk-size 13 --out "$tmp/ref.safetensors" >/dev/null
  for eager in "" "--pp-eager-bank-forward"; do
    out=$(timeout 120 "$mpiexec" --oversubscribe -np 4 "$bin" forward --model "$d" --input-ids "$ids" --chunk-size 13 \
          --pp 4 $eager --out "$tmp/pp.safetensors" 2>&1)
    cmp -s "$tmp/ref.safetensors" "$tmp/pp.safetensors" || { echo "FAIL: $d $eager differs: $out"; exit 1; }
    bank=$(grep -o "stage 1: .*" <<<"$out" | grep -o "([0-9.]* MB bank)")
    echo "ok: $(basename "$d") pp=4 ${eager:-(eager off)} bit-identical; stage 1 $bank"
  done
done

# Each stage opens only the shards that hold its layers and reads only its tensors (17-shard checkpoint, 3 stages):
# every rank opens fewer than the 17 shards, and together they read no more than one whole-model load.
sharded=$(dirname "$0")/../data/variants/dsv3_groups_sharded
whole=$("$bin" forward --model "$sharded" --input-ids 1,2,3 | grep -o "([0-9.]* MB read from [0-9]* file" | grep -o "[0-9.]* MB" | grep -o "[0-9.]*")
out=$(timeout 120 "$mpiexec" --oversubscribe -np 3 "$bin" forward --model "$sharded" --input-ids 1,2,3 --pp 3 2>&1)
grep "^rank" <<<"$out"
OUT="$out" python3 - "$whole" <<'PY' || { echo "FAIL: per-stage reads: $out"; exit 1; }
import os, re, sys
whole = float(sys.argv[1])
rows = re.findall(r"^rank \d+ \(stage (\d+).*loaded (\d+) tensors, ([\d.]+) MB read from (\d+) file", os.environ["OUT"], re.M)
assert len(rows) == 3, rows
assert all(int(f) < 17 for *_, f in rows), rows
total = sum(float(mb) for _, _, mb, _ in rows)
assert total <= whole + 0.1, (total, whole)  # plus the headers of the shards each stage opens
print(f"ok: stages read {', '.join(mb + ' MB' for _, _, mb, _ in rows)} (sum {total:.2f} MB, one process {whole} MB), "
      f"opening {', '.join(f for *_, f in rows)} of 17 shards")
PY

# --load-format dummy: seeded random weights from the config alone (a config .json file is enough), no file read; each
# stage generates only its own layers, so PP 3 is bit-identical to one process with the same seed.
cp "$fixtures/deepseek_v3_tiny/config.json" "$tmp/dsv3_config.json"
dids=$(python3 -c "print(','.join(str((i * 37 + 11) % 100) for i in range(60)))")
for m in "$tmp/dsv3_config.json" "$fixtures/glm_moe_dsa_tiny" "$fixtures/kimi_linear_tiny" \
         "$(dirname "$0")/../data/variants_k3/k3_tiny_block2"; do
  one=$("$bin" forward --model "$m" --load-format dummy --input-ids "$dids" --chunk-size 17 \
        --out "$tmp/dummy1.safetensors")
  grep -q "loaded 0 tensors (0.0 MB read from 0 file(s))" <<<"$one" || { echo "FAIL: dummy read a file: $one"; exit 1; }
  out=$(timeout 120 "$mpiexec" --oversubscribe -np 3 "$bin" forward --model "$m" --load-format dummy \
        --input-ids "$dids" --chunk-size 17 --pp 3 --out "$tmp/dummy3.safetensors" 2>&1) ||
    { echo "FAIL: dummy pp=3 $m: $out"; exit 1; }
  cmp -s "$tmp/dummy1.safetensors" "$tmp/dummy3.safetensors" || { echo "FAIL: dummy pp=3 differs for $m"; exit 1; }
  echo "ok: $(basename "$m") --load-format dummy: pp=3 bit-identical to one process, 0 files read"
done
# Block-FP8 dummy weights (--fp8-weights native, what the 8-GPU Kimi K3 study serves): also per stage, bit-identical.
m="$(dirname "$0")/../data/variants_k3/k3_tiny_block2"
"$bin" forward --model "$m" --load-format dummy --fp8-weights native --input-ids "$dids" --chunk-size 17 \
  --out "$tmp/dummy1.safetensors" >/dev/null
out=$(timeout 120 "$mpiexec" --oversubscribe -np 3 "$bin" forward --model "$m" --load-format dummy --fp8-weights native \
      --input-ids "$dids" --chunk-size 17 --pp 3 --out "$tmp/dummy3.safetensors" 2>&1) ||
  { echo "FAIL: dummy fp8 pp=3 $m: $out"; exit 1; }
cmp -s "$tmp/dummy1.safetensors" "$tmp/dummy3.safetensors" || { echo "FAIL: dummy fp8 pp=3 differs for $m"; exit 1; }
echo "ok: $(basename "$m") --load-format dummy --fp8-weights native: pp=3 bit-identical to one process"
set +e
bad=$("$bin" forward --load-format bogus --input-ids 1 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "load-format must be auto or dummy" <<<"$bad" || { echo "FAIL: bad --load-format: rc=$rc $bad"; exit 1; }
echo "ok: --load-format bogus refused with exit code 2"
