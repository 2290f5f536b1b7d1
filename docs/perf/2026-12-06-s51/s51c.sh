#!/usr/bin/env bash
# Session 51, call C (any GPU; on an H200 also Kimi K3's KDA row). Archive s51c holds two bundles: s51b (73ec284: the
# layer code of 05089c9, the same SASS as session 50's s50b, + the wgmma probe's three / four warpgroup and yield rows)
# and s51c (s51b + yield_promote.patch: a __nanosleep(0) after every 16 FFMAs of the 256-wide FP8 GEMMs' promotion;
# only its penstock_bench_kernels has it).
#   1. the wgmma probe (s51b), one round;
#   2. the DeepSeek-V3 expert GEMMs at T = 16384 (penstock_bench_kernels --only fp8), s51b and s51c alternated, 3 rounds;
#   3. the goal rows with the landed code (s51b), each beside its same-call baseline: DeepSeek-V3 layer 3 at 16K, bf16
#      (dequant) and native FP8 + --fp8-attention, around torch.compile's composition;
#   4. an H200: Kimi K3 layer 1 (KDA) native FP8 around torch.compile + fla chunk_kda (needs the H200's memory);
#      another GPU: GLM-5.3 layer 6 at 16K (native FP8, FP8 indexer, fp8-accumulate) around torch.compile.
set -uo pipefail
NAME=s51c; O=/tmp/out.s51c; source tools/device_bundle_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s51c.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
/tmp/s/s51b/bin/penstock_bench_kernels --only wgmma_probe > "${O}/probe.jsonl" 2> "${O}/probe.log"
echo "probe rc $? at ${SECONDS}s"
python3 - "${O}/probe.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print("probe cta_wgs", r.get("cta_warpgroups", 2), "wgs", r["warpgroups"], "n", r["n"], "chains",
              r["chains_per_kstep"], r["mode"], r["form"], round(r["tflops"]))
PY
save
fp8_lines() {  # the grouped variants' median us and TFLOP/s of one bench output
  python3 - "$1" "$2" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r = json.loads(l)
    if r.get('bench') != 'fp8_grouped_gemm': continue
    print(f"  {sys.argv[2]} {r['shape'][:12]:12s} {r['variant']:18s} {r['time_us']:9.1f} us {r.get('tflops', 0):7.1f} TFLOP/s")
PY
}
for r in 1 2 3; do
  for b in s51b s51c; do
    PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=16384 timeout 120 "/tmp/s/$b/bin/penstock_bench_kernels" --only fp8 \
      > "$O/fp8.$r.$b.jsonl" 2> "$O/fp8.$r.$b.err.log"
    echo "fp8 bench $b round $r rc $? at ${SECONDS}s"; fp8_lines "$O/fp8.$r.$b.jsonl" "$b"
  done
done
save
LAYER_REPS=6 layer s51b dsv3bf.1 deepseek-v3.json 3:4 16384 --fp8-weights dequant
LAYER_REPS=6 layer s51b dsv3f8.1 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
torch_layer deepseek-v3 16384 170
LAYER_REPS=6 layer s51b dsv3bf.2 deepseek-v3.json 3:4 16384 --fp8-weights dequant
LAYER_REPS=6 layer s51b dsv3f8.2 deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
save
[ "${SECONDS}" -lt 360 ] || exit 0
case "$gpu" in
  *H200*)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
      > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
    LAYER_REPS=5 layer s51b k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
    torch_layer kimi-k3-kda 16384 $((570 - SECONDS))
    LAYER_REPS=5 layer s51b k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native ;;
  *)
    G=(--fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate)
    LAYER_REPS=6 layer s51b glm16.1 glm-5.3.json 6:7 16384 "${G[@]}"
    torch_layer glm-5.3 16384 $((570 - SECONDS))
    LAYER_REPS=6 layer s51b glm16.2 glm-5.3.json 6:7 16384 "${G[@]}" ;;
esac
save
