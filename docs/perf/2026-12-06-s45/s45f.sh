#!/usr/bin/env bash
# Session 45, call F (needs an H200: torch's Kimi K3 KDA composition does not fit an 80 GB H100): bundle s45e =
# 6b16841, conformance already passed on this binary (call E). Kimi K3 layer 1 (KDA) native FP8 and bf16 weights around torch.compile + fla chunk_kda in the same call.
set -uo pipefail
NAME=s45e; O=/tmp/out.s45f; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s45f.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
LAYER_REPS=5 layer s45e k3kdaf8.1 kimi-k3.json 1:2 16384 --fp8-weights native
LAYER_REPS=5 layer s45e k3kdabf.1 kimi-k3.json 1:2 16384 --fp8-weights dequant
PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout 220 python3 tools/torch_layer_baseline.py --model kimi-k3-kda \
  --configs "$P/configs" --tokens 16384 > "$O/torch.kimi-k3-kda.16384.log" 2>&1
echo "torch kimi-k3-kda rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.kimi-k3-kda.16384.log"
LAYER_REPS=5 layer s45e k3kdaf8.2 kimi-k3.json 1:2 16384 --fp8-weights native
save
python3 - "$O" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.s45e.json"))):
    r = json.load(open(f))[0]; b = {x["scope"]: x["median_ms"] for x in r.get("breakdown", [])}
    print(os.path.basename(f), "forward", round(r["median_ms"], 2), "with setup", round(r.get("median_ms_with_setup", 0), 2),
          "recurrence", round(b.get("layer.kda.recurrence", 0), 3))
PY
