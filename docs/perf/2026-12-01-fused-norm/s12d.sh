#!/usr/bin/env bash
# Session 12, call D: Kimi K3 layers with native FP8 weights (dummy block-FP8 weights standing in for K3's FP8 / MXFP4
# release: MLA, shared and routed experts e4m3; KDA projections bf16) against bf16 weights, in one process per layer
# (penstock_model_bench --fp8-weights dequant,native), twice; cuda_runtime_test.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s12d.tar.xz -C /tmp/s
P=/tmp/s/s12d; O=/tmp/s12d; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 100 $P/bin/cuda_runtime_test > $O/runtime_test.log 2>&1; echo "runtime rc $?"; tail -1 $O/runtime_test.log
for r in 1 2; do
for b in "kimi-k3.kda-moe 1:2" "kimi-k3.mla-moe 3:4"; do
  set -- $b
  timeout 200 $P/bin/penstock_model_bench --config $P/configs/kimi-k3.json --model-name $1 --layers $2 --tokens 16384 \
    --reps 8 --breakdown --fp8-weights dequant,native --json $O/$1.$r.json > $O/$1.$r.log 2>&1
  echo "$1 round $r rc $? $(python3 -c "import json,sys; print(', '.join(f\"{x.get('fp8_weights','?')} {x['median_ms']:.2f} ms\" for x in json.load(open(sys.argv[1])) if 'median_ms' in x))" $O/$1.$r.json 2>/dev/null)"
done; done
tar -C /tmp -cJf $OUT/s12d.tar.xz s12d
