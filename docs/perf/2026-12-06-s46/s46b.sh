#!/usr/bin/env bash
# Session 46, call B: bundle s46b = 950b559 + the MoE permute in token order (moe.cu permute_scatter_kernel), beside
# s45j (= 950b559's code). MoeOpTest conformance first; then DeepSeek-V3 layer 3 at 16K, bf16 and native FP8 +
# --fp8-attention, s46b / s45j interleaved (the permute scope); GLM-5.3 FP8 at 16K once each; Nsight on the new
# scatter kernel and the old gather kernel (DRAM bytes and throughput).
set -uo pipefail
NAME=s46b; O=/tmp/out.s46b; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s46b.tgz" *.log *.json *.txt 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_kernels_test" 'MoeOpTest.*' 150 || { save; echo "conformance did not pass: stopping"; exit 0; }
grep -E "^\[ +(OK|FAILED) " "$O/conf.log" | head
save
for r in 1 2; do
  LAYER_REPS=6 LAYER_TIMEOUT=80 layer s46b dsv3bf.$r deepseek-v3.json 3:4 16384
  LAYER_REPS=6 LAYER_TIMEOUT=80 layer s45j dsv3bf.$r deepseek-v3.json 3:4 16384
  LAYER_REPS=6 LAYER_TIMEOUT=80 layer s46b dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  LAYER_REPS=6 LAYER_TIMEOUT=80 layer s45j dsv3f8.$r deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  save
done
LAYER_REPS=6 LAYER_TIMEOUT=80 layer s46b glmf8.1 glm-5.3.json 3:4 16384 --fp8-weights native
LAYER_REPS=6 LAYER_TIMEOUT=80 layer s45j glmf8.1 glm-5.3.json 3:4 16384 --fp8-weights native
save
python3 - "$O" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    r = json.load(open(f))[0]; b = {x["scope"]: x["median_ms"] for x in r.get("breakdown", [])}
    print(os.path.basename(f), "forward", round(r["median_ms"], 2), "permute", round(b.get("layer.moe.permute", 0), 3),
          "permute.other", round(b.get("layer.moe.permute.(other)", 0), 3), "unpermute", round(b.get("layer.moe.unpermute", 0), 3))
PY
NCU_TIMEOUT=150 ncu_sass scatter permute_scatter /tmp/s/s46b/bin/penstock_model_bench --config "$P/configs/deepseek-v3.json" \
  --layers 3:4 --tokens 16384 --reps 1
grep -E "DRAM Throughput|Duration|Memory Throughput" "$O/scatter.details.txt" | head -4
NCU_TIMEOUT=150 ncu_sass gather "permute_kernel" /tmp/s/s45j/bin/penstock_model_bench --config "$P/configs/deepseek-v3.json" \
  --layers 3:4 --tokens 16384 --reps 1
grep -E "DRAM Throughput|Duration|Memory Throughput" "$O/gather.details.txt" | head -4
save
