#!/usr/bin/env bash
# Session 46, call D (an H200: torch's Kimi K3 KDA composition does not fit an 80 GB H100): bundle s46d = b07c22d (the
# token-order MoE permute, the unpermute's four slot loads in flight) + the GEMM consumer stagger knob
# (PENSTOCK_GEMM_STAGGER, default off), beside s45j (950b559's code). MoeOpTest
# conformance first (if it fails, every row runs on s45j). Then the layer goal rows on the H200 with their same-call
# baselines: DeepSeek-V3 layer 3 at 16K bf16 (dequant) s46d / s45j alternated around torch.compile, and native FP8 +
# --fp8-attention; Kimi K3 layer 1 (KDA) native FP8 / bf16 around torch.compile + fla chunk_kda; the KDA kernel at 4K /
# 16K / 64K beside fla chunk_kda bf16; GLM-5.3 layer 6 at 16K (native FP8, FP8 indexer, fp8-accumulate) around torch's
# composition, with the time left.
set -uo pipefail
NAME=s46d; O=/tmp/out.s46d; source tools/device_bundle_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s46d.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
B=s46d
conformance "$P/bin/cuda_kernels_test" 'MoeOpTest.*' 150 || { B=s45j; echo "conformance did not pass: rows on s45j"; }
save
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
torch_layer() {  # MODEL TOKENS TIMEOUT
  PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout "$3" python3 tools/torch_layer_baseline.py --model "$1" \
    --configs "$P/configs" --tokens "$2" > "$O/torch.$1.$2.log" 2>&1
  echo "torch $1 $2 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.$1.$2.log"
}
for round in 1 2; do
  LAYER_REPS=6 layer $B dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer s45j dsv3bf.$round deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer $B dsv3f8.$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  [ $round = 1 ] && [ -z "${SKIP_TORCH:-}" ] && torch_layer deepseek-v3 16384 120
done
save
# The consumer stagger (cycles) against none, interleaved: the expert GEMMs' scopes.
for st in 2000 0 4000 0; do
  PENSTOCK_GEMM_STAGGER=$st LAYER_REPS=6 layer $B dsv3bf.st$st.$SECONDS deepseek-v3.json 3:4 16384 --fp8-weights dequant
  PENSTOCK_GEMM_STAGGER=$st LAYER_REPS=6 layer $B dsv3f8.st$st.$SECONDS deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
done
python3 - "$O" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.st*.json"))):
    r = json.load(open(f))[0]; b = {x["scope"]: x["median_ms"] for x in r.get("breakdown", [])}
    print(os.path.basename(f), "forward", round(r["median_ms"], 2), "gate_up_act", round(b.get("layer.moe.experts.gate_up_act", 0), 3),
          "down", round(b.get("layer.moe.experts.down", 0), 3), "shared", round(b.get("layer.moe.shared", 0), 3))
PY
save
case "$gpu" in *H200*) ;; *) echo "not an H200 ($gpu): no Kimi K3 torch row"; exit 0 ;; esac
LAYER_REPS=5 layer $B k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 layer $B k3kdabf.1 kimi-k3.json 1:2 16384 --fp8-weights dequant
torch_layer kimi-k3-kda 16384 200
LAYER_REPS=5 layer $B k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
save
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96,65536:96
timeout 60 "/tmp/s/$B/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.1.jsonl" 2>&1
echo "kda bench rc $? at ${SECONDS}s"; kda_split_lines "$O/kda.1.jsonl" $B
PENSTOCK_FLA_CASES=bf16 PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout 150 python3 tools/fla_kda_baseline.py 4096 16384 65536 > "$O/fla.jsonl" 2> "$O/fla.err.log"
echo "fla rc $? at ${SECONDS}s"; python3 -c "
import json
for l in open('$O/fla.jsonl'): r=json.loads(l); print('fla bf16', r['tokens'], round(r['ms'],3))"
timeout 60 "/tmp/s/$B/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.2.jsonl" 2>&1
echo "kda bench rc $? at ${SECONDS}s"; kda_split_lines "$O/kda.2.jsonl" $B
save
[ "${SECONDS}" -lt 430 ] || exit 0
LAYER_REPS=5 layer $B glmf8.1 glm-5.3.json 6:7 16384 --fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate
torch_layer glm-5.3 16384 $((585 - SECONDS))
save
