#!/usr/bin/env bash
# Session 12, call G: native FP8 on the GPU against the dequantised CPU reference, per family, on real (tiny) FP8
# checkpoints: each fixture converted to FP8 here with torch (fp8_copy.py, the conversion of fp8_weights_test.cc), then
# `penstock forward` on 150 tokens: CPU dequant (the reference), CPU native, GPU native (f32 and bf16 activations);
# logits_diff against the CPU dequant logits with the family's bound from fp8_weights_test.cc (the CPU native run
# must pass it too), and GPU native against CPU native for information.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s12f.tar.xz -C /tmp/s
P=/tmp/s/s12f; O=/tmp/s12g; mkdir -p $O /tmp/fp8; D=build-dev-lead/s12g
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
IDS=$(cat $D/ids.txt)
{
for pair in "kimi_linear_tiny 5.0" "k3_tiny_block2 5.0" "glm_moe_dsa_tiny 3.5" "deepseek_v3_tiny 2.5"; do
  set -- $pair; n=$1; tol=$2
  python3 docs/perf/2026-12-01-fused-norm/fp8_copy.py $D/$n /tmp/fp8/$n 2>&1 | tail -1
  run() { timeout 120 $P/bin/penstock forward --model /tmp/fp8/$n --input-ids $IDS --threads 0 --out $O/$n.$1.safetensors "${@:2}" > $O/$n.$1.log 2>&1 || echo "$n $1 failed: $(tail -2 $O/$n.$1.log)"; }
  run cpu_dq --backend cpu --fp8-weights dequant
  run cpu_nat --backend cpu --fp8-weights native
  run gpu_nat --backend cuda --dtype float32 --fp8-weights native
  run gpu_nat_bf16 --backend cuda --dtype bfloat16 --fp8-weights native
  for r in cpu_nat gpu_nat gpu_nat_bf16; do echo "$n $r vs cpu dequant (tol $tol): $($P/bin/logits_diff $O/$n.$r.safetensors $O/$n.cpu_dq.safetensors $tol; echo " rc $?")"; done
  echo "$n gpu_nat vs cpu_nat: $($P/bin/logits_diff $O/$n.gpu_nat.safetensors $O/$n.cpu_nat.safetensors $tol; echo " rc $?")"
done
} 2>&1 | tee $O/summary.txt
rm -f $O/*.safetensors
tar -C /tmp -cJf $OUT/s12g.tar.xz s12g
