#!/usr/bin/env bash
# Session 49, call C (one-line command on the same warm H100, bundle s49a with s48d): the bf16 kernel's lazy max on
# two more shapes, interleaved: Kimi K3's MLA layer (layer 4, 64 heads) at 16K and DeepSeek-V3 at 4K, bf16.
set -uo pipefail
NAME=s49a; O=/tmp/out.s49c; source tools/device_bundle_env.sh
save() { cd "$O" && tar czf "${OUT}/s49c.tgz" *.log *.json 2>/dev/null; cd - > /dev/null; }
for r in 1 2; do for b in s49a s48d; do
  LAYER_REPS=5 layer $b k3mlabf.$r kimi-k3.json 3:4 16384 --fp8-weights dequant
  LAYER_REPS=6 layer $b dsv3bf4k.$r deepseek-v3.json 3:4 4096 --fp8-weights dequant
done; done
save
