#!/usr/bin/env bash
# Session 11, call E: every GPU test binary on the committed tree (cuda_runtime_test, cuda_attention_cudnn_test,
# cuda_kernels_test), then the act-quant kernel with two groups per half-warp (*.x8 binaries: its conformance, and the
# fp8 bench of both builds back to back).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s11.tar.xz -C /tmp/s; P=/tmp/s/s11
O=/tmp/s11e; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT) $(date -u +%T)"
for t in cuda_runtime_test cuda_attention_cudnn_test cuda_kernels_test; do
  s0=$(date +%s)
  timeout 330 $P/bin/$t > $O/$t.log 2>&1; echo "$t rc $? in $(( $(date +%s) - s0 )) s ($(grep -c '| PASS' $O/$t.log) conf PASS, $(grep -c '| FAIL' $O/$t.log) conf FAIL)"
  grep -E "^\[  PASSED|^\[  FAILED|tests ran" $O/$t.log | head -6
done
timeout 60 $P/bin/cuda_kernels_test.x8 --gtest_filter='Fp8Test.ActQuant*:Fp8TmaTest.GroupedGemmGlu*' > $O/x8_test.log 2>&1; echo "x8 tests rc $?"
grep -E "^\[  PASSED|^\[  FAILED|tie test" $O/x8_test.log
for b in penstock_bench_kernels penstock_bench_kernels.x8 penstock_bench_kernels penstock_bench_kernels.x8; do
  timeout 80 $P/bin/$b --only fp8 2>/dev/null | python3 -c "
import json,sys
rows=[json.loads(l) for l in sys.stdin if l.startswith('{')]
print('$b', ' '.join(f\"{r['shape'][:6]}/{r['rows']}:{r['time_us']:.1f}us\" for r in rows if r.get('bench')=='fp8_act_quant'))
" | tee -a $O/actq_ab.log
done
tar -C /tmp -cJf $OUT/s11e.tar.xz s11e
