#!/usr/bin/env bash
# Session 22, call A: the paired-tile sparse MLA kernel (MlaTcVariant::kWgmmaPair) — MLA conformance (every variant
# against the CPU reference), the mla kernel bench (kWgmma / kWgmmaWs / kWgmmaPair in the same process), and
# racecheck of the new kernel on the sparse conformance cases.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s22a.tar.xz -C /tmp/s
P=/tmp/s/s22a; O=$OUT
echo "commit $(cat $P/COMMIT)"
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.mem --format=csv,noheader
set -f
timeout 120 $P/bin/cuda_kernels_test --gtest_filter='MlaTcOpTest.*:DsaOpTest.SparseMla*' > $O/conformance.log 2>&1
echo "conformance rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/conformance.log | head -8
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/conformance.log) FAIL $(grep -c '\[conf\].*FAIL' $O/conformance.log)"
echo "  wgmma-pair PASS $(grep '\[conf\]' $O/conformance.log | grep 'wgmma-pair' | grep -c PASS) FAIL $(grep '\[conf\]' $O/conformance.log | grep 'wgmma-pair' | grep -c FAIL)"
grep '\[conf\].*FAIL' $O/conformance.log | head -10
timeout 150 $P/bin/penstock_bench_kernels --only mla --warmup 3 --reps 15 > $O/bench.jsonl 2>&1
echo "bench rc $? at ${SECONDS}s"
python3 - $O/bench.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"): continue
    r = json.loads(line)
    print(f"{r['bench']:8s} {r['kernel']:24s} H{r['heads']:<4d} prefix {r.get('prefix', 0):>6} {r['time_us']:>9.1f} us "
          f"{r.get('tflops', 0):6.1f} TFLOP/s diff {r.get('max_abs_diff_vs_old', float('nan')):.2e}")
PY
if command -v compute-sanitizer >/dev/null; then
  timeout 150 compute-sanitizer --tool racecheck --racecheck-report all --kernel-name kns=mla_wgmma_pair_kernel \
    $P/bin/cuda_kernels_test --gtest_filter='MlaTcOpTest.Sparse*' > $O/racecheck.full 2>&1
  echo "racecheck rc $? at ${SECONDS}s: hazards $(grep -c 'hazard detected' $O/racecheck.full); $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $O/racecheck.full | tail -1)"
  grep -E "mla_wgmma_pair.cu:[0-9]+" $O/racecheck.full | sed 's/.* in //' | sort | uniq -c | head -8
  head -c 400000 $O/racecheck.full > $O/racecheck.log; rm -f $O/racecheck.full
fi
