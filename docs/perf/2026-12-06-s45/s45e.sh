#!/usr/bin/env bash
# Session 45, call E (an H200 when one comes): bundle s45e = 6b16841 (the bf16 prep kernel, the only one). The
# delta-rule conformance (fused and split); the kda bench twice at 4K, 16K, 64K beside fla chunk_kda bf16 in the same
# call; Kimi K3 layer 1 (KDA) native FP8 and bf16 weights around torch.compile + fla chunk_kda (the KDA layer goal
# row; torch's composition needs an H200); then, with the time left, DeepSeek-V3 layer 3 bf16 / FP8 around
# torch.compile.
set -uo pipefail
NAME=s45e; O=/tmp/out.s45e; source tools/device_bundle_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s45e.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" 'KdaOpTest.DeltaRule*' 150 || { save; echo "conformance did not pass: stopping"; exit 0; }
save
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96,65536:96
for r in 1 2; do
  timeout 90 "$P/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.$r.jsonl" 2>&1
  echo "kda bench rc $? at ${SECONDS}s"; kda_split_lines "$O/kda.$r.jsonl" s45e.$r
  [ $r = 1 ] || continue
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
    > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
  PENSTOCK_FLA_CASES=bf16 PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout 150 python3 tools/fla_kda_baseline.py 4096 16384 65536 > "$O/fla.jsonl" 2> "$O/fla.err.log"
  echo "fla rc $? at ${SECONDS}s"; python3 -c "
import json
for l in open('$O/fla.jsonl'): r=json.loads(l); print('fla bf16', r['tokens'], round(r['ms'],3))"
  save
done
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
PENSTOCK_KDA_TC_PROFILE=1 timeout 60 "$P/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 2 > "$O/kda.profile.log" 2>&1
grep "kda_split" "$O/kda.profile.log" | tail -1
save
torch_layer() {  # MODEL TOKENS TIMEOUT
  PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout "$3" python3 tools/torch_layer_baseline.py --model "$1" \
    --configs "$P/configs" --tokens "$2" > "$O/torch.$1.$2.log" 2>&1
  echo "torch $1 $2 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.$1.$2.log"
}
case "$gpu" in
  *H200*)
    LAYER_REPS=5 layer s45e k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
    LAYER_REPS=5 layer s45e k3kdabf.1 kimi-k3.json 1:2 16384 --fp8-weights dequant
    torch_layer kimi-k3-kda 16384 200
    LAYER_REPS=5 layer s45e k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
    save ;;
  *) echo "not an H200 ($gpu): the Kimi K3 torch composition needs one"
     LAYER_REPS=5 layer s45e k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
     save ;;
esac
if [ "${SECONDS}" -lt 380 ]; then
  LAYER_REPS=5 layer s45e dsv3bf.1 deepseek-v3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=5 layer s45e dsv3f8.1 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  torch_layer deepseek-v3 16384 $((560 - SECONDS))
  save
fi
python3 - "$O" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.s45e.json"))):
    r = json.load(open(f))[0]; b = {x["scope"]: x["median_ms"] for x in r.get("breakdown", [])}
    print(os.path.basename(f), "forward", round(r["median_ms"], 2), "with setup", round(r.get("median_ms_with_setup", 0), 2),
          "recurrence", round(b.get("layer.kda.recurrence", 0), 3))
PY
