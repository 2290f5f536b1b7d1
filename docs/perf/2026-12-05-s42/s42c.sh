#!/usr/bin/env bash
# Session 42, call C (bundle s42b = d0c7622: the screened heap replay with replace_top's int pops and 16-byte child
# loads): the top-k conformance and host ports; the dsa bench (a 16K chunk after 48K / 112K prefixes: default vs the
# serial replay, same inputs); on an H200, Kimi K3's MLA layer 3 (native FP8: b023023's FP8 g_proj) and GLM-5.3 layer 6
# at 16K and 64K (native FP8, FP8 indexer, fp8-accumulate), each beside torch_layer_baseline.py's composition in the
# same call; GLM-5.3's 16K chunk after a 114688-token prefix; Nsight Compute on the stream top-k's launch in GLM-5.3's
# 64K layer. (Its first half, as s42b.sh, was refused a machine four times.)
set -uo pipefail
NAME=s42b; O=/tmp/out.s42c; source tools/device_bundle_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s42c.tgz" *.log *.json *.jsonl *.txt 2>/dev/null; cd - > /dev/null; }
timeout 200 "$P/bin/cuda_kernels_test" --gtest_filter='DsaOpTest.Topk*:StlSelectPort.*' > "$O/conf.log" 2>&1
echo "top-k conformance rc $?: $(grep -c 'PASS$' "$O/conf.log") PASS lines, $(grep -c 'FAIL' "$O/conf.log") FAIL; $(grep -E '^\[  (PASSED|FAILED)' "$O/conf.log" | tr '\n' ' ')"
save
timeout 150 "$P/bin/penstock_bench_kernels" --only dsa --warmup 1 --reps 3 > "$O/dsa.jsonl" 2>&1
echo "dsa bench rc $? at ${SECONDS}s"
python3 tools/dsa_topk_lines.py "$O/dsa.jsonl"
save
scopes() { python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]; b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print('  ', ', '.join(f'{k.split(\".\")[-1]} {b[k]:.2f}' for k in sys.argv[2:] if k in b))
" "$@"; }
torch_layer() {  # MODEL TOKENS TIMEOUT
  PYTHONUNBUFFERED=1 timeout "$3" python3 tools/torch_layer_baseline.py --model "$1" --configs "$P/configs" \
    --tokens "$2" > "$O/torch.$1.$2.log" 2>&1
  echo "torch $1 $2 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.$1.$2.log"
}
G=(--fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate)
LAYER_REPS=5 LAYER_TIMEOUT=100 layer s42b glm128 glm-5.3.json 6:7 16384 --prefix 114688 "${G[@]}"
scopes "$O/glm128.s42b.json" layer.attn.indexer.topk layer.attn.indexer.logits
save
ncu_topk() {
  NCU_TIMEOUT=${1} ncu_sass topk_stream dsa_topk_stream_kernel "$P/bin/penstock_model_bench" \
    --config "$P/configs/glm-5.3.json" --layers 6:7 --tokens 65536 --reps 1 "${G[@]}"
  grep -E "DRAM Throughput|Memory Throughput|L2 Hit|Achieved Occupancy|Block Limit|Duration" \
    "$O/topk_stream.details.txt" | head -20
  save
}
case "$gpu" in
  *H200*)
    layer s42b k3mlaf8.1 kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention
    scopes "$O/k3mlaf8.1.s42b.json" layer.attn.out_gate layer.attn.o_proj layer.attn.q_proj
    torch_layer kimi-k3-mla 16384 100
    layer s42b k3mlaf8.2 kimi-k3.json 3:4 16384 --fp8-weights native --fp8-attention
    save
    layer s42b glm16.1 glm-5.3.json 6:7 16384 "${G[@]}"
    torch_layer glm-5.3 16384 100
    layer s42b glm16.2 glm-5.3.json 6:7 16384 "${G[@]}"
    save
    [ "${SECONDS}" -lt 400 ] && ncu_topk 100
    if [ "${SECONDS}" -lt 330 ]; then
      LAYER_REPS=5 LAYER_TIMEOUT=100 layer s42b glm64 glm-5.3.json 6:7 65536 "${G[@]}"
      scopes "$O/glm64.s42b.json" layer.attn.indexer.topk layer.attn.indexer.logits
      torch_layer glm-5.3 65536 $((570 - SECONDS))
      save
    fi ;;
  *)
    echo "not an H200 ($gpu): torch's K3 composition does not fit; the layer rows stay for an H200"
    ncu_topk 150 ;;
esac
