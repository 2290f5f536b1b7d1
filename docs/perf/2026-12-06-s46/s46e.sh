#!/usr/bin/env bash
# Session 46, call E (any GPU): bundle s46d (b07c22d + the GEMM consumer stagger knob). The grouped GEMM tests with
# PENSTOCK_GEMM_STAGGER=3000 (bf16 and FP8 TMA kernels, tail-heavy routing, the gated epilogues); then DeepSeek-V3
# layer 3 at 16K, bf16 (dequant) and native FP8 + --fp8-attention, with the stagger at 0 / 2000 / 4000 cycles
# interleaved, three rounds: the expert GEMMs' scopes.
set -uo pipefail
NAME=s46d; O=/tmp/out.s46e; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s46e.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
PENSTOCK_GEMM_STAGGER=3000 conformance "$P/bin/cuda_kernels_test" \
  'GroupedGemmKernelTest.*:GroupedGemmDeviceTest.*:Fp8TmaTest.GroupedGemm*' 200 || { save; echo "conformance did not pass: stopping"; exit 0; }
grep -E "^\[ +(OK|FAILED) " "$O/conf.log" | tail -8
save
for round in 1 2 3; do
  for st in 0 2000 4000; do
    PENSTOCK_GEMM_STAGGER=$st LAYER_REPS=6 layer s46d dsv3bf.st$st.r$round deepseek-v3.json 3:4 16384 --fp8-weights dequant
    PENSTOCK_GEMM_STAGGER=$st LAYER_REPS=6 layer s46d dsv3f8.st$st.r$round deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  done
  save
done
python3 - "$O" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.st*.json"))):
    r = json.load(open(f))[0]; b = {x["scope"]: x["median_ms"] for x in r.get("breakdown", [])}
    print(os.path.basename(f), "forward", round(r["median_ms"], 2), "gate_up_act", round(b.get("layer.moe.experts.gate_up_act", 0), 3),
          "down", round(b.get("layer.moe.experts.down", 0), 3), "layer", round(b.get("layer", 0), 2))
PY
