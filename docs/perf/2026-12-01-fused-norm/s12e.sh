#!/usr/bin/env bash
# Session 12, call E: the whole native-FP8 forward on the GPU against the CPU reference, per family (Kimi K3-shaped
# variant, Kimi Linear, DeepSeek-V3, GLM-5.3 DSA tiny configs; dummy weights, which are bit-identical on both devices),
# f32 activations, MoE routing / DSA top-k pinned to the CPU run's decisions: `penstock forward --backend cuda
# --pin-decisions` vs the CPU logits recorded here (build-dev-lead/s12e), logits_diff. Then the Kimi K3 layers with
# native FP8 KDA projections (penstock_model_bench --fp8-weights dequant,native), twice.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s12f.tar.xz -C /tmp/s
P=/tmp/s/s12f; O=/tmp/s12e; mkdir -p $O; D=build-dev-lead/s12e
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
IDS=$(cat $D/ids.txt)
for n in k3_tiny_block2 kimi_linear_tiny deepseek_v3_tiny_fp8 glm_moe_dsa_tiny; do for w in native dequant; do
  timeout 60 $P/bin/penstock forward --model $D/$n.config.json --load-format dummy --fp8-weights $w --backend cuda \
    --dtype float32 --input-ids $IDS --pin-decisions $D/$n.$w.dec --out $O/$n.$w.gpu.safetensors > $O/$n.$w.log 2>&1
  echo "$n $w forward rc $? | $($P/bin/logits_diff $O/$n.$w.gpu.safetensors $D/$n.$w.cpu.safetensors 0.05)"
done; done
for r in 1 2; do
for b in "kimi-k3.kda-moe 1:2" "kimi-k3.mla-moe 3:4"; do
  set -- $b
  timeout 200 $P/bin/penstock_model_bench --config $P/configs/kimi-k3.json --model-name $1 --layers $2 --tokens 16384 \
    --reps 8 --breakdown --fp8-weights dequant,native --json $O/$1.$r.json > $O/$1.$r.log 2>&1
  echo "$1 round $r rc $? $(python3 -c "import json,sys; print(', '.join(f\"{x.get('fp8_weights','?')} {x['median_ms']:.2f} ms\" for x in json.load(open(sys.argv[1])) if 'median_ms' in x))" $O/$1.$r.json 2>/dev/null)"
done; done
rm -f $O/*.safetensors
tar -C /tmp -cJf $OUT/s12e.tar.xz s12e
