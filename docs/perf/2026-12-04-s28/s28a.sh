#!/usr/bin/env bash
# Session 28, call A (bundle s28a = d3d952c): Nsight Compute on the dense o_proj FP8 GEMM at T = 16384 (cuBLASLt's
# block-scaled kernel against Penstock's TMA kernels) and on the grouped DeepSeek-V3 down GEMM at T = 16384; then the
# DeepSeek-V3 FP8 layer (+ --fp8-attention) with PENSTOCK_FP8_PAIR unset and =glu, alternated.
set -uo pipefail
NAME=s28a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
prof() {  # tag shape
  local tag=$1 shape=$2
  PENSTOCK_FP8_BENCH_SHAPE="$shape" PENSTOCK_FP8_BENCH_T=16384 timeout 240 "$NCU" --clock-control none \
    -k 'regex:^(?!.*(fill|quant|convert|uniform|Fill)).*' -c 90 --set full --import-source no \
    -o $O/prof.$tag $P/bin/penstock_bench_kernels --only fp8 > $O/prof.$tag.log 2>&1
  echo "ncu $tag rc $? at ${SECONDS}s"; tail -2 $O/prof.$tag.log
  "$NCU" -i $O/prof.$tag.ncu-rep --page details > $O/prof.$tag.details.txt 2>&1
  "$NCU" -i $O/prof.$tag.ncu-rep --page raw --csv > $O/prof.$tag.raw.csv 2>&1
  rm -f $O/prof.$tag.ncu-rep
  grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Cluster Size|Grid Size|Registers Per" \
    $O/prof.$tag.details.txt | awk '!seen[$0]++' | head -60
}
prof o "o 16384"
prof down "dsv3 down"
layer() {  # pairmode tag
  local pm=$1 tag=$2
  env ${pm:+PENSTOCK_FP8_PAIR=$pm} timeout 120 $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --layers 3:4 \
    --tokens 16384 --reps 8 --fp8-weights native --fp8-attention --breakdown --json $O/$tag.json > $O/$tag.log 2>&1
  echo "$tag pair=${pm:-unset} rc $?: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (down {b.get('layer.moe.experts.down', 0):.2f}, gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f})\")" $O/$tag.json 2>/dev/null)"
}
for round in 1 2 3; do
  layer "" dsv3.unset.$round
  layer glu dsv3.glu.$round
done
cd $O && tar czf ${OUT:-/tmp}/s28a.tgz *
