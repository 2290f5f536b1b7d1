#!/usr/bin/env bash
# Session 26, call A: (1) the DSA conformance on the top-k whose scan clears its own bins (branch s26-topk), then the
# dsa kernel bench of that build and of main's (penstock_bench_kernels.base: the four-keys-per-lane compaction, session
# 25), alternated, two rounds; (2) Nsight Compute (clocks not locked) on the FP8 grouped GEMMs inside the DeepSeek-V3
# layer at T 16384 with native FP8 weights (the fused gate/up + SiLU + quantisation kernel and the down kernel of the
# timed rep): the full section set and the SASS with stall samples. Results straight under $OUT.
set -uo pipefail
N=${NAME:-s26a}
mkdir -p /tmp/s && [ -d /tmp/s/$N ] || tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=${OUT:-/tmp}/$N; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64
echo "commit $(cat $P/COMMIT)"
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='DsaOpTest.*' > $O/conf.log 2>&1
echo "conformance rc $? at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED, $(grep -c 'PASS' $O/conf.log) PASS lines"
grep -E "FAILED|differ|mismatch" $O/conf.log | head -8
for round in 1 2; do
  for b in new base; do
    bin=$P/bin/penstock_bench_kernels; [ $b = base ] && bin=$bin.base
    timeout 90 $bin --only dsa --warmup 2 --reps 7 > $O/dsa.$b.$round.jsonl 2>&1
    echo "dsa bench $b round $round rc $? at ${SECONDS}s"
    python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r['bench'] == 'dsa_topk' and 'ms' in r:
            print(f\"  T{r.get('tokens')} {r.get('input', 'logits')[:12]}: {r['ms']:.4f} / {r.get('ms_second_round', 0):.4f} ms; legacy {r.get('legacy_ms', 0):.3f}; tied {r.get('tied_rows')}; mism {r.get('mismatches_vs_legacy')}\")
" $O/dsa.$b.$round.jsonl
  done
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
timeout 300 $NCU --clock-control none -k regex:fp8_gemm_tma_kernel --launch-skip 2 --launch-count 2 --set full \
  --import-source no -o $O/fp8 $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --layers 3:4 \
  --tokens 16384 --warmup 1 --reps 1 --fp8-weights native > $O/ncu.log 2>&1
echo "ncu rc $? at ${SECONDS}s"
tail -3 $O/ncu.log
$NCU -i $O/fp8.ncu-rep --page details > $O/fp8.details.txt 2>&1
$NCU -i $O/fp8.ncu-rep --page source --print-source sass --csv > $O/fp8.sass.csv 2>&1
grep -E "fp8_gemm_tma_kernel|Duration|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Achieved Occupancy|Executed Ipc|Memory Throughput|Compute \(SM\)|Tensor|Shared|L2 Cache Throughput|DRAM Throughput|SM Frequency" $O/fp8.details.txt | head -60
gzip -f $O/fp8.sass.csv
