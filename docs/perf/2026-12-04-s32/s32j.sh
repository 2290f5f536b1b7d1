#!/usr/bin/env bash
# Session 32, call J: bundle s32j (the two RoPE kernels' warp item and cos / sin table as shared helpers, the code
# review's duplicate): the RoPE tests again and the copy bench's rope_mla_q records (expected unchanged from call G).
set -uo pipefail
NAME=s32j; O=/tmp/out.s32j; source tools/device_bundle_env.sh
timeout 200 $P/bin/cuda_kernels_test --gtest_filter='ElementwiseOpTest.*' > $O/elementwise_test.log 2>&1
echo "elementwise rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/elementwise_test.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $O/elementwise_test.log | head -5
timeout 200 $P/bin/cuda_attention_cudnn_test --gtest_filter='*Rope*' > $O/fp8_rope_test.log 2>&1
echo "fp8 rope rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/fp8_rope_test.log | tr '\n' ' '); $(grep -c '| PASS' $O/fp8_rope_test.log) PASS, $(grep -c '| FAIL' $O/fp8_rope_test.log) FAIL conformance lines"
timeout 120 $P/bin/penstock_bench_kernels --only copy > $O/copy.s32j.jsonl 2>&1
python3 - $O/copy.s32j.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    x = json.loads(l)
    if x.get('bench') in ('rope_mla_q', 'copy_d2d') and x.get('mib', 256) == 256:
        print(x.get('bench'), x.get('heads', ''), x.get('interleaved', ''),
              f"{x['time_us']:.1f} us {x['gbps']:.0f} GB/s {x.get('pct_of_copy_peak', 0):.1f}% of copy")
PY
cd $O && tar czf ${OUT:-/tmp}/s32j.tgz *.log *.jsonl
