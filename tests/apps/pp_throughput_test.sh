#!/usr/bin/env bash
# Pipeline throughput on the CPU (SPEC §4): C = 8 concurrent 512-token prompts, chunk budget 128, PP = 4. With the
# default pp_max_micro_batch_size (max(max_running_requests / pp, 1)) every slot holds a micro-batch, so all 4 stages
# work at once; with pp_max_micro_batch_size = 1 one request runs at a time and its chunks are sequential, so a single
# micro-batch is ever in flight and every stage idles ~3/4 of the time (the starved pipeline). Asserted structurally
# (micro-batches in flight: 4 vs 1; logits identical either way); the per-stage busy and bubble fractions and the
# input tok/s are printed as figures (CPU timings of oversubscribed ranks: not asserted).
# usage: pp_throughput_test.sh PENSTOCK MPIEXEC FIXTURES_DIR
set -euo pipefail
bin=$1; mpiexec=$2; fixtures=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_mpi_yield_when_idle=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ids=$(python3 -c "print(','.join(str((i * 37 + 11) % 256) for i in range(512)))")
for mb in 0 1; do
  timeout 300 "$mpiexec" --oversubscribe -np 4 "$bin" forward --model "$fixtures/deepseek_v3_tiny" --input-ids "$ids" \
      --chunk-size 128 --threads 1 --pp 4 --concurrency 8 --pp-max-micro-batch-size "$mb" \
      --out "$tmp/mb$mb.safetensors" > "$tmp/mb$mb.log" 2>&1 || { cat "$tmp/mb$mb.log"; exit 1; }
  echo "pp_max_micro_batch_size=$([ "$mb" = 0 ] && echo default || echo 1):"
  grep -E "stage [0-9]:|pp_max_micro_batch_size" "$tmp/mb$mb.log"
done
grep -q "at most 4 in flight" "$tmp/mb0.log" || { echo "FAIL: the default cap did not fill the 4 slots"; exit 1; }
grep -q "at most 1 in flight" "$tmp/mb1.log" || { echo "FAIL: pp_max_micro_batch_size=1 ran more than one micro-batch"; exit 1; }
cmp -s "$tmp/mb0.safetensors" "$tmp/mb1.safetensors" || { echo "FAIL: logits differ between the two schedules"; exit 1; }
busy() { grep -o "busy [0-9.]* ms ([0-9]*%)" "$1" | grep -o "([0-9]*" | tr -d '(' | awk '{s+=$1} END {printf "%.0f", s/NR}'; }
echo "ok: default cap keeps 4 micro-batches in flight (mean stage busy $(busy "$tmp/mb0.log")%); cap 1 keeps 1" \
     "(mean stage busy $(busy "$tmp/mb1.log")%); logits bit-identical"
