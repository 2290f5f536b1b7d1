#!/usr/bin/env bash
# Session 47, call B = session 46's s46f.sh without its s45j rows (the carry limit takes one bundle). (An H200: torch's Kimi K3 KDA composition does not fit an 80 GB H100): bundle s46c (= b07c22d's
# code: the token-order MoE permute and the unpermute's four slot loads; MoeOpTest passed on it in call C), beside
# s45j (950b559). The goal rows that need the H200, each beside its same-call baseline: Kimi K3 layer 1 (KDA) native
# FP8 / bf16 around torch.compile + fla chunk_kda; DeepSeek-V3 layer 3 at 16K bf16 (dequant) around torch.compile,
# native FP8 + --fp8-attention; the KDA kernel at 4K / 16K / 64K beside fla chunk_kda bf16.
set -uo pipefail
NAME=s46c; O=/tmp/out.s47b; source tools/device_bundle_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s47b.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
case "$gpu" in *H200*) ;; *) echo "not an H200 ($gpu): stopping"; exit 0 ;; esac
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
LAYER_REPS=5 layer s46c k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 layer s46c k3kdabf.1 kimi-k3.json 1:2 16384 --fp8-weights dequant
torch_layer kimi-k3-kda 16384 200
LAYER_REPS=5 layer s46c k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
save
[ "${SECONDS}" -lt 180 ] || exit 0
LAYER_REPS=6 layer s46c dsv3bf.1 deepseek-v3.json 3:4 16384 --fp8-weights dequant
torch_layer deepseek-v3 16384 120
LAYER_REPS=6 layer s46c dsv3bf.2 deepseek-v3.json 3:4 16384 --fp8-weights dequant
LAYER_REPS=6 layer s46c dsv3f8.1 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
save
[ "${SECONDS}" -lt 250 ] || exit 0
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96,65536:96
timeout 40 "$P/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.1.jsonl" 2>&1
echo "kda bench rc $? at ${SECONDS}s"; kda_split_lines "$O/kda.1.jsonl" s46c
PENSTOCK_FLA_CASES=bf16 PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout $((370 - SECONDS)) python3 tools/fla_kda_baseline.py 4096 16384 65536 > "$O/fla.jsonl" 2> "$O/fla.err.log"
echo "fla rc $? at ${SECONDS}s"; python3 -c "
import json
for l in open('$O/fla.jsonl'): r=json.loads(l); print('fla bf16', r['tokens'], round(r['ms'],3))"
timeout 40 "$P/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.2.jsonl" 2>&1
echo "kda bench rc $? at ${SECONDS}s"; kda_split_lines "$O/kda.2.jsonl" s46c
save
