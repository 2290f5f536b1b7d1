#!/usr/bin/env bash
# Session 15, call C (the quantiser's packs held in registers, the k descale read early): cuda_attention_cudnn_test
# (fp8_quantize_heads bit-exact, the FP8 kernel with per-row q / per-block k descales and the FMA-pipe exponentials,
# the fallbacks), then an interleaved A/B of the FP8-attention layers (DeepSeek-V3 and Kimi K3 MLA, native FP8
# weights + --fp8-attention, 16K): this build (per-row q, per-block k straight from k_nope and k_pe) against call A's
# model bench (per-tensor q / k / v after the bf16 K build), packed as bin/penstock_model_bench_s15a.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s15c.tar.xz -C /tmp/s
P=/tmp/s/s15c; O=/tmp/s15c; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
for t in cuda_attention_cudnn_test; do
  timeout 220 $P/bin/$t > $O/$t.log 2>&1; echo "$t rc $?"
  grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -5
  echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
done
for t in cuda_attention_cudnn_test; do grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log; done
PKG=$P OUT=$O/ab MODES="BIN=penstock_model_bench_s15a default" LAYERS="dsv3na k3mlana" REPS=8 ROUNDS=3 RUN_TIMEOUT=60 \
  timeout 200 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat $O/ab/ab.log
tar -C /tmp -cJf $OUT/s15c.tar.xz s15c
