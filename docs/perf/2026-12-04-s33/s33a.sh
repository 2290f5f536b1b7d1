#!/usr/bin/env bash
# Session 33, call A: bundle s33a (the f32 DSA indexer logits kernel on 128 x 128 tiles, 512 threads, the heads' q rows
# through a two-slot cp.async ring) against s33base (ec36421: session 32's 64 x 128 kernel). DsaOpTest on both
# (the tiled kernel against the reference and bit for bit against the per-element kernel; the Perf test's f32
# TFLOP/s), GLM-5.3's layer 6 at 16K with bf16 weights and the default indexer alternated, two rounds, then Nsight
# Compute on the new kernel.
set -uo pipefail
NAME=s33a; O=/tmp/out.s33a; source tools/device_bundle_env.sh
export PENSTOCK_CUDA_PERF=1
for b in s33a s33base; do
  timeout 300 /tmp/s/$b/bin/cuda_kernels_test --gtest_filter='DsaOpTest.IndexerLogits*:DsaOpTest.Perf' > $O/dsa_test.$b.log 2>&1
  echo "$b DsaOpTest rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/dsa_test.$b.log | tr '\n' ' '); $(grep -c '| PASS' $O/dsa_test.$b.log) PASS, $(grep -c '| FAIL' $O/dsa_test.$b.log) FAIL"
  grep -E "^\[  FAILED|\| FAIL" $O/dsa_test.$b.log | head -5
  grep -E "\[perf\] dsa_indexer_logits f32" $O/dsa_test.$b.log
done
unset PENSTOCK_CUDA_PERF
for round in 1 2; do
  for b in s33a s33base; do layer $b glmbf.$round glm-5.3.json 6:7 16384 --fp8-weights dequant; done
done
for f in $O/glmbf.*.json; do python3 -c "
import json,sys; r=json.load(open(sys.argv[1]))[0]; b={x['scope']:x['median_ms'] for x in r['breakdown']}
print(sys.argv[1].split('/')[-1], 'indexer', round(b.get('layer.attn.indexer',0),2), 'logits', round(b.get('layer.attn.indexer.logits',0),2), 'layer', round(r['median_ms'],2))" $f; done
PENSTOCK_CUDA_PERF=1 timeout 200 /usr/local/cuda/bin/ncu --clock-control none -k regex:f32_tiled --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
  --section MemoryWorkloadAnalysis --section InstructionStats \
  /tmp/s/s33a/bin/cuda_kernels_test --gtest_filter=DsaOpTest.Perf > $O/ncu_f32.txt 2>&1
echo "ncu rc $? at ${SECONDS}s"
grep -E "Duration|SM Frequency|Registers|Issue Slots Busy|Warp Cycles Per Issued|Stall|Achieved Occupancy|Executed Ipc|Shared" $O/ncu_f32.txt | head -40
cd $O && tar czf ${OUT:-/tmp}/s33a.tgz *.log *.json *.txt
