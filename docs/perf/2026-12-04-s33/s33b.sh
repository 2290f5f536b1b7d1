#!/usr/bin/env bash
# Session 33, call B: bundle s33b (call A's kernel with a compile-time head_dim: 128 / 64, else run time) against
# s33base (ec36421: session 32's 64 x 128 kernel). DsaOpTest on both (the tiled kernel against the reference and bit
# for bit against the per-element kernel; the Perf test's f32 TFLOP/s), GLM-5.3's layer 6 at 16K with bf16 weights and
# the default indexer alternated, two rounds, then Nsight Compute on the new kernel (details and SASS hotspots).
set -uo pipefail
NAME=s33b; O=/tmp/out.s33b; source tools/device_bundle_env.sh
export PENSTOCK_CUDA_PERF=1
for b in s33b s33base; do
  timeout 300 /tmp/s/$b/bin/cuda_kernels_test --gtest_filter='DsaOpTest.IndexerLogits*:DsaOpTest.Perf' > $O/dsa_test.$b.log 2>&1
  echo "$b DsaOpTest rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/dsa_test.$b.log | tr '\n' ' '); $(grep -c '| PASS' $O/dsa_test.$b.log) PASS, $(grep -c '| FAIL' $O/dsa_test.$b.log) FAIL"
  grep -E "^\[  FAILED|\| FAIL" $O/dsa_test.$b.log | head -5
  grep -E "\[perf\] dsa_indexer_logits f32" $O/dsa_test.$b.log
done
unset PENSTOCK_CUDA_PERF
for round in 1 2; do
  for b in s33b s33base; do layer $b glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant; done
done
for f in $O/glmbf.*.json; do python3 -c "
import json,sys; r=json.load(open(sys.argv[1]))[0]; b={x['scope']:x['median_ms'] for x in r['breakdown']}
print(sys.argv[1].split('/')[-1], 'indexer', round(b.get('layer.attn.indexer',0),2), 'logits', round(b.get('layer.attn.indexer.logits',0),2), 'layer', round(r['median_ms'],2))" $f; done
NCU=/usr/local/cuda/bin/ncu
PENSTOCK_CUDA_PERF=1 timeout 200 $NCU --clock-control none -k regex:f32_tiled --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section SourceCounters \
  -o $O/f32 /tmp/s/s33b/bin/cuda_kernels_test --gtest_filter=DsaOpTest.Perf > $O/ncu.log 2>&1
echo "ncu rc $? at ${SECONDS}s"
$NCU -i $O/f32.ncu-rep --page details > $O/f32.details.txt 2>&1
$NCU -i $O/f32.ncu-rep --page source --print-source sass --csv > $O/f32.sass.csv 2> $O/f32.sass.err
rm -f $O/f32.ncu-rep
python3 tools/ncu_sass_hotspots.py $O/f32.sass.csv --top 25 > $O/f32.hotspots.txt 2>&1
grep -E "Duration|SM Frequency|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  |FMA is" $O/f32.details.txt | head
head -60 $O/f32.hotspots.txt
cd $O && tar czf ${OUT:-/tmp}/s33b.tgz *.log *.json *.txt *.csv
