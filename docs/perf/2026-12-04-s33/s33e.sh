#!/usr/bin/env bash
# Session 33, call E: bundle s33e (call B's f32 indexer kernel with the next head's copies issued after the first 16
# columns' products instead of right after the barrier) against s33b (1b0575a). DsaOpTest.IndexerLogits on s33e (the
# reference, bit for bit against the per-element kernel), the Perf test's f32 TFLOP/s on both alternated, GLM-5.3's
# layer 6 at 16K with bf16 weights and the default indexer alternated, three rounds, then Nsight Compute hotspots on s33e.
set -uo pipefail
NAME=s33e; O=/tmp/out.s33e; source tools/device_bundle_env.sh
timeout 300 /tmp/s/s33e/bin/cuda_kernels_test --gtest_filter='DsaOpTest.IndexerLogits*' > $O/dsa_test.s33e.log 2>&1
echo "s33e IndexerLogits rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $O/dsa_test.s33e.log | tr '\n' ' '); $(grep -c '| PASS' $O/dsa_test.s33e.log) PASS, $(grep -c '| FAIL' $O/dsa_test.s33e.log) FAIL"
grep -E "^\[  FAILED|\| FAIL" $O/dsa_test.s33e.log | head -5
for round in 1 2; do
  for b in s33e s33b; do
    PENSTOCK_CUDA_PERF=1 timeout 120 /tmp/s/$b/bin/cuda_kernels_test --gtest_filter='DsaOpTest.Perf' > $O/perf.$round.$b.log 2>&1
    echo "perf $round $b rc $? at ${SECONDS}s: $(grep -E '\[perf\] dsa_indexer_logits f32 \|.*TFLOP' $O/perf.$round.$b.log)"
  done
done
for round in 1 2 3; do
  for b in s33e s33b; do layer $b glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant; done
done
for f in $O/glmbf.*.json; do python3 -c "
import json,sys; r=json.load(open(sys.argv[1]))[0]; b={x['scope']:x['median_ms'] for x in r['breakdown']}
print(sys.argv[1].split('/')[-1], 'indexer', round(b.get('layer.attn.indexer',0),2), 'logits', round(b.get('layer.attn.indexer.logits',0),2), 'layer', round(r['median_ms'],2))" $f; done
NCU=/usr/local/cuda/bin/ncu
PENSTOCK_CUDA_PERF=1 timeout 200 $NCU --clock-control none -k regex:f32_tiled --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section SourceCounters \
  -o $O/f32 /tmp/s/s33e/bin/cuda_kernels_test --gtest_filter=DsaOpTest.Perf > $O/ncu.log 2>&1
echo "ncu rc $? at ${SECONDS}s"
$NCU -i $O/f32.ncu-rep --page details > $O/f32.details.txt 2>&1
$NCU -i $O/f32.ncu-rep --page source --print-source sass --csv > $O/f32.sass.csv 2> $O/f32.sass.err
rm -f $O/f32.ncu-rep
python3 tools/ncu_sass_hotspots.py $O/f32.sass.csv --top 25 > $O/f32.hotspots.txt 2>&1
grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  |FMA is" $O/f32.details.txt | head
sed -n '/^regions/,$p' $O/f32.hotspots.txt | head -14
cd $O && tar czf ${OUT:-/tmp}/s33e.tgz *.log *.json *.txt *.csv
