#!/usr/bin/env bash
# Session 33, call C: the f32 DSA indexer kernel with the heads' q rows through an mbarrier ring (4 slots of 64
# columns, copies 2 chunks ahead, a warp waits only for warps more than 2 chunks behind): s33c (column loop unrolled
# by 2, no spill) and s33d (by 4, 36 bytes spilled in the copy path) against s33b (call B's kernel: two head slots, one
# barrier per head). DsaOpTest on each (reference, bit for bit against the per-element kernel, the Perf test's f32
# TFLOP/s), GLM-5.3's layer 6 at 16K with bf16 weights and the default indexer alternated, three rounds, then Nsight
# Compute hotspots on s33c and s33d.
set -uo pipefail
NAME=s33c; O=/tmp/out.s33c; source tools/device_bundle_env.sh
export PENSTOCK_CUDA_PERF=1
for b in s33c s33d s33b; do
  timeout 300 /tmp/s/$b/bin/cuda_kernels_test --gtest_filter='DsaOpTest.IndexerLogits*:DsaOpTest.Perf' > $O/dsa_test.$b.log 2>&1
  echo "$b DsaOpTest rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/dsa_test.$b.log | tr '\n' ' '); $(grep -c '| PASS' $O/dsa_test.$b.log) PASS, $(grep -c '| FAIL' $O/dsa_test.$b.log) FAIL"
  grep -E "^\[  FAILED|\| FAIL" $O/dsa_test.$b.log | head -5
  grep -E "\[perf\] dsa_indexer_logits f32 \|.*TFLOP" $O/dsa_test.$b.log
done
unset PENSTOCK_CUDA_PERF
for round in 1 2 3; do
  for b in s33c s33d s33b; do layer $b glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant; done
done
for f in $O/glmbf.*.json; do python3 -c "
import json,sys; r=json.load(open(sys.argv[1]))[0]; b={x['scope']:x['median_ms'] for x in r['breakdown']}
print(sys.argv[1].split('/')[-1], 'indexer', round(b.get('layer.attn.indexer',0),2), 'logits', round(b.get('layer.attn.indexer.logits',0),2), 'layer', round(r['median_ms'],2))" $f; done
NCU=/usr/local/cuda/bin/ncu
for b in s33c s33d; do
  PENSTOCK_CUDA_PERF=1 timeout 200 $NCU --clock-control none -k regex:f32_tiled --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section SourceCounters \
    -o $O/f32.$b /tmp/s/$b/bin/cuda_kernels_test --gtest_filter=DsaOpTest.Perf > $O/ncu.$b.log 2>&1
  echo "ncu $b rc $? at ${SECONDS}s"
  $NCU -i $O/f32.$b.ncu-rep --page details > $O/f32.$b.details.txt 2>&1
  $NCU -i $O/f32.$b.ncu-rep --page source --print-source sass --csv > $O/f32.$b.sass.csv 2> $O/f32.$b.sass.err
  rm -f $O/f32.$b.ncu-rep
  python3 tools/ncu_sass_hotspots.py $O/f32.$b.sass.csv --top 25 > $O/f32.$b.hotspots.txt 2>&1
  grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  |FMA is" $O/f32.$b.details.txt | head
  sed -n '/^regions/,$p' $O/f32.$b.hotspots.txt | head -14
done
cd $O && tar czf ${OUT:-/tmp}/s33c.tgz *.log *.json *.txt *.csv
