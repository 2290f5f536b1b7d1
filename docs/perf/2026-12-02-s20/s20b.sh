#!/usr/bin/env bash
# Session 20, call B (ab5cb43): the KDA op tests (short_conv's fused norm bit for bit short_conv + l2norm; the l2norm
# 4-wide kernel), KdaOpTest.Perf against session 19's binary (s19g) alternating, then the layers beside their torch
# compositions in the same call (tools/session_gpu_check.sh: DeepSeek-V3, GLM-5.3, Kimi K3 KDA and MLA at 16K;
# torch.compile for DeepSeek-V3 and GLM-5.3).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s20b.tar.xz -C /tmp/s && tar -xJf build-dev-lead/s19g.tar.xz -C /tmp/s
P=/tmp/s/s20b; O=/tmp/s20b; mkdir -p $O/sc
echo "commit $(cat $P/COMMIT)"
L="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
LD_LIBRARY_PATH=$P/lib:$L timeout 120 $P/bin/cuda_kernels_test --gtest_filter='KdaOpTest.*:KdaBf16OpTest.*' > $O/kda_tests.log 2>&1
echo "kda tests rc $? at ${SECONDS}s"; grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/kda_tests.log | head -6
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/kda_tests.log) FAIL $(grep -c '\[conf\].*FAIL' $O/kda_tests.log)"
for r in 1 2; do for b in s19g s20b; do
  LD_LIBRARY_PATH=/tmp/s/$b/lib:$L PENSTOCK_CUDA_PERF=1 timeout 60 /tmp/s/$b/bin/cuda_kernels_test \
    --gtest_filter='KdaOpTest.Perf' 2>&1 | grep -E "\[perf\]" | grep -E "short_conv|l2norm" | sed "s/^/  $b r$r /"
done; done
echo "perf done at ${SECONDS}s"
PKG=$P OUT=$O/sc FILTER=none BENCHES="dsv3 glm k3kda k3mla" TORCH_MODELS="deepseek-v3 glm-5.3" REPS=8 TORCH_TIMEOUT=170 \
  timeout $((570 - SECONDS)) bash $P/tools/session_gpu_check.sh 2>&1 | grep -v "^ *warnings.warn\|UserWarning" | tail -30
echo "session check done at ${SECONDS}s"
tar -C /tmp -cJf $OUT/s20b.tar.xz s20b
