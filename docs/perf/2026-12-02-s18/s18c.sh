#!/usr/bin/env bash
# Session 18, call C (kTmaDynCluster now the default device kernel): the device grouped GEMM tests under that default
# and the FP8 GEMM tests (tile_util.cuh's group search was factored out of decode_group_tile), then
# interleaved layer A/Bs of kTmaDynCluster (default) against kTmaDyn (PENSTOCK_GG_PAIRS=0) where the device kernel is already the
# default: Kimi K3's KDA and MLA layers at 16K (292 rows per expert), DeepSeek-V3 and GLM-5.3 at 4K (128 per expert).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s18c.tar.xz -C /tmp/s
P=/tmp/s/s18c; O=$OUT/s18c; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_kernels_test
timeout 120 $P/bin/$t --gtest_filter='Fp8Test.*Gemm*:Fp8TmaTest.*:Kernels/GroupedGemmKernelTest.*tma_dyn*:GroupedGemmDeviceTest.*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|OK \]" $O/$t.log | head -20
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "\[conf\].*FAIL" $O/$t.log | head -5
grep -E "OK \]|PASSED|FAILED|\[conf\]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
PKG=$P OUT=/tmp/ab16 MODES="default PENSTOCK_GG_PAIRS=0" LAYERS="k3kda k3mla" T=16384 REPS=16 ROUNDS=2 RUN_TIMEOUT=45 \
  timeout 200 bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat /tmp/ab16/ab.log | tee $O/ab16.log
left=$((570 - SECONDS)); [ $left -gt 150 ] && left=150
PKG=$P OUT=/tmp/ab4 MODES="default PENSTOCK_GG_PAIRS=0" LAYERS="dsv3 glm" T=4096 REPS=40 ROUNDS=2 RUN_TIMEOUT=30 \
  timeout $left bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat /tmp/ab4/ab.log | tee $O/ab4.log
tar -C /tmp -cJf $O/ab.tar.xz ab16 ab4
