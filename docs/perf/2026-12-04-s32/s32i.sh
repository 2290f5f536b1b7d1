#!/usr/bin/env bash
# Session 32, call I: per-instruction stall samples of the DeepSeek-V3 bf16 layer's routed down GEMM (kTmaDynCluster,
# 16K; the second grouped_gemm_tma_kernel launch of the first forward) and, for comparison, the fused gate/up GEMM
# (the first), on bundle s32h (c53fd5e's code), summarised by tools/ncu_sass_hotspots.py.
set -uo pipefail
NAME=s32h; O=/tmp/out.s32i; source tools/device_bundle_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for which in down gateup; do
  skip=$([ $which = down ] && echo 1 || echo 0)
  timeout 200 "$NCU" --clock-control none -k regex:grouped_gemm_tma_kernel --launch-skip $skip --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no -o $O/$which \
    $P/bin/penstock_model_bench --config $P/configs/deepseek-v3.json --layers 3:4 --tokens 16384 --reps 1 --warmup 0 \
    --fp8-weights dequant > $O/ncu.$which.log 2>&1
  echo "ncu $which rc $? at ${SECONDS}s"
  "$NCU" -i $O/$which.ncu-rep --page details > $O/$which.details.txt 2>&1
  "$NCU" -i $O/$which.ncu-rep --page source --print-source sass --csv > $O/$which.sass.csv 2> $O/$which.sass.err
  rm -f $O/$which.ncu-rep
  python3 tools/ncu_sass_hotspots.py $O/$which.sass.csv --top 25 > $O/$which.hotspots.txt 2>&1
  gzip -f $O/$which.sass.csv
  grep -E "Duration|SM Frequency|Compute \(SM\)|Warp Cycles Per Issued" $O/$which.details.txt | head -5
  sed -n '/^regions/,$p' $O/$which.hotspots.txt | head -16
done
cd $O && tar czf ${OUT:-/tmp}/s32i.tgz *.txt *.log *.csv.gz
