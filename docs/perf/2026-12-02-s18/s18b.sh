#!/usr/bin/env bash
# Session 18, call B: kTmaDynCluster with units of two tiles that share the weight tile or, for a group's odd last
# m-tile, the activation tile (tile_util.cuh pair_units; no idle rank): conformance (Kernels/GroupedGemmKernelTest.*,
# GroupedGemmDeviceTest.*), the grouped bench with a 0.6 s sustained run per kernel (joules per call, NVML), then the
# interleaved bf16 layer A/B (experts on cuBLASLt = default at 16K / kTmaDyn / kTmaDynCluster) with 20 reps.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s18b.tar.xz -C /tmp/s
P=/tmp/s/s18b; O=$OUT/s18b; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_kernels_test
timeout 150 $P/bin/$t --gtest_filter='Kernels/GroupedGemmKernelTest.*:GroupedGemmDeviceTest.*' > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|OK \]" $O/$t.log | head -20
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "\[conf\].*FAIL" $O/$t.log | head -5
grep -E "tma_dyn_cluster\]" $O/$t.log | head -30 > $O/dyn_cluster_cases.txt
PENSTOCK_BENCH_ENERGY_S=0.6 PENSTOCK_BENCH_GG_KERNELS=tma_dyn,tma_dyn_cluster,glu_dyn,glu_dyn_cluster timeout 200 $P/bin/penstock_bench_kernels --only grouped > $O/grouped.jsonl 2>$O/grouped.err
echo "grouped bench rc $? at ${SECONDS}s"
grep -h "glu pair" $O/grouped.jsonl $O/grouped.err | head
python3 - <<PY
import json
print('  model proj T variant tflops(burst) sustained_tflops J/call W diff')
for l in open('$O/grouped.jsonl'):
    try: r=json.loads(l)
    except Exception: continue
    print(' ', r.get('model'), r.get('proj'), r.get('tokens'), r.get('variant'), round(r.get('tflops',0)), round(r.get('sustained_tflops',0)), round(r.get('energy_j',-1),3), round(r.get('mean_power_w',-1)), r.get('max_abs_diff_vs_cublaslt_64rows',''))
PY
left=$((575 - SECONDS)); [ $left -gt 300 ] && left=300
PKG=$P OUT=/tmp/ab MODES="default PENSTOCK_GROUPED_GEMM=device PENSTOCK_GROUPED_GEMM=device,PENSTOCK_GG_PAIRS=1" LAYERS="dsv3 glm" REPS=20 ROUNDS=2 RUN_TIMEOUT=40 \
  timeout $left bash $P/tools/layer_ab.sh > /dev/null 2>&1
cat /tmp/ab/ab.log | tee $O/ab.log
tar -C /tmp -cJf $O/ab.tar.xz ab
# cuBLASLt's kernel for one DeepSeek-V3 gate_up group at T = 16384 (its name carries the tile and cluster shape).
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "$NCU" ] && [ $SECONDS -lt 520 ]; then
  PENSTOCK_BENCH_GG_CASE=deepseek_v3:gate_up:16384 PENSTOCK_BENCH_GG_KERNELS=tma_dyn timeout $((590 - SECONDS)) $NCU --launch-skip 40 --launch-count 1 \
    -k regex:'nvjet|sm90|xmma|cutlass' --section LaunchStats --section SpeedOfLight $P/bin/penstock_bench_kernels --only grouped > $O/ncu_cublaslt.txt 2>&1
  grep -E "^  [a-zA-Z_].*\(|Grid Size|Cluster|Block Size|Duration|SM Frequency|Registers|Shared Memory Config" $O/ncu_cublaslt.txt | head -20
fi
