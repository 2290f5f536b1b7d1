#!/usr/bin/env bash
# Session 31, call G (right after F, the machine warm): DeepSeek-V3's bf16 layer at 16K on s31g (984e7cf's code)
# beside tools/torch_layer_baseline.py's torch.compile composition in the same call (the bf16 >= 1.2x goal's
# baseline, last run in session 20). Results are written straight to $OUT so that a cut-off call still returns them.
set -uo pipefail
NAME=s31g; O=${OUT:-/tmp/out.s31f}; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
for r in 3; do
  timeout 60 $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --layers 3:4 --tokens 16384 --reps 8 \
    --fp8-weights dequant --json $O/dsv3bf.$r.json > $O/dsv3bf.$r.log 2>&1
  echo "penstock dsv3 bf16 round $r rc $? at ${SECONDS}s: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[0]; print(f\"{r['median_ms']:.2f} ms (min {r['min_ms']:.2f})\")" $O/dsv3bf.$r.json 2>/dev/null)"
done
PYTHONUNBUFFERED=1 timeout 170 python3 tools/torch_layer_baseline.py --model deepseek-v3 --configs $P/configs \
  --tokens 16384 > $O/torch2.deepseek-v3.log 2>&1
echo "torch rc $? at ${SECONDS}s"; grep -E "ms" $O/torch2.deepseek-v3.log | tail -4
for r in 4; do
  timeout 60 $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --layers 3:4 --tokens 16384 --reps 8 \
    --fp8-weights dequant --json $O/dsv3bf.$r.json > $O/dsv3bf.$r.log 2>&1
  echo "penstock dsv3 bf16 round $r rc $? at ${SECONDS}s: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[0]; print(f\"{r['median_ms']:.2f} ms (min {r['min_ms']:.2f})\")" $O/dsv3bf.$r.json 2>/dev/null)"
done
