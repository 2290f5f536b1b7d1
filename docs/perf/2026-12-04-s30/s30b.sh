#!/usr/bin/env bash
# Session 30, call B: (1) the attention kernel bench of s30a (tile_util's item prefix) and s29h (10c3a03) alternated
# twice, the FP8 rows; (2) Nsight Compute on the DeepSeek-V3 FP8 layer at T = 16384 (s30a): the FP8 attention's
# quantisers (q per row, k per block, v per tensor), RoPE and the MoE permute.
set -uo pipefail
NAME=s30a; source tools/device_bundle_env.sh
for round in 1 2; do
  for b in s30a s29h; do
    timeout 120 /tmp/s/$b/bin/penstock_bench_kernels --only attention > $O/attn.$round.$b.jsonl 2>&1
    echo "== attention bench $b rc $? at ${SECONDS}s"
  done
done
python3 - $O/attn.1.s30a.jsonl $O/attn.1.s29h.jsonl $O/attn.2.s30a.jsonl $O/attn.2.s29h.jsonl <<'PY'
import json, sys
def load(f):
    return [json.loads(l) for l in open(f) if l.startswith('{')]
print("shape seq impl: s30a / s29h / s30a / s29h ms")
for rs in zip(*(load(f) for f in sys.argv[1:])):
    x = rs[0]
    if x.get('bench') != 'attention' or x.get('tflops', 0) < 50 or 'fp8' not in x.get('impl', '') or 'cudnn' in x.get('impl', ''): continue
    print(f"{x.get('shape','')!s:16.16s} {x.get('seq')} {x.get('impl','')!s:34.34s} " + " / ".join(f"{r['time_us']/1000:.3f}" for r in rs))
PY
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
timeout 240 $NCU --clock-control none --set full -k "regex:head_quant|amax_kernel|cast_kernel|rope_heads|permute_kernel" -c 7 \
  $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --layers 3:4 --tokens 16384 --reps 1 --warmup 0 \
  --fp8-weights native --fp8-attention > $O/ncu.log 2>&1
echo "ncu rc $? at ${SECONDS}s"
grep -E '^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occ|Block Limit Reg|L2 Hit|Compute \(SM\) Thr|Grid Size|Block Size' $O/ncu.log | head -120
cd $O && tar czf ${OUT:-/tmp}/s30b.tgz *.log *.jsonl
