#!/usr/bin/env bash
# Session 15, call D: the quantisers one by one (penstock_bench_kernels --only attention: fp8_quantize_tensor per
# tensor against fp8_quantize_heads per row / per 128-key block, records "fp8_quantize"), then Nsight Compute on the
# per-row and per-block kernels when ncu is there.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s15d.tar.xz -C /tmp/s
P=/tmp/s/s15d; O=/tmp/s15d; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"
timeout 200 $P/bin/penstock_bench_kernels --only attention > $O/attn_bench.jsonl 2> $O/attn_bench.err; echo "bench rc $?"
grep '"fp8_quantize"' $O/attn_bench.jsonl | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r['shape'], r['seq'], {k: round(v,3) for k,v in r.items() if k.endswith('_ms')})"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
echo "ncu: ${NCU:-none}"
if [ -n "$NCU" ]; then
  timeout 150 $NCU -k regex:head_quant -c 3 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis $P/bin/penstock_bench_kernels --only attention > $O/ncu.txt 2>&1
  grep -E "head_quant|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Compute \(SM\)|Theoretical Occ" $O/ncu.txt | head -60
fi
tar -C /tmp -cJf $OUT/s15d.tar.xz s15d
