#!/usr/bin/env bash
# Session 28, call C (bundle s28b): Nsight Compute's per-instruction warp-stall samples (SourceCounters) on the
# grouped DeepSeek-V3 down FP8 GEMM at T = 16384, then the SASS with its samples. Written to take the wide and pair
# kernels, but the bench launches each variant 13 times (a checked call, 2 warm-up, 10 timed): tag "wide" (skip 12)
# got the 128-wide kernel's last launch, tag "pair" (skip 24) the wide 128 x 256 kernel's 12th, "n128" the 128-wide
# kernel's first (docs/perf/2026-12-04-s28.md, section 3).
set -uo pipefail
NAME=s28b; source tools/device_bundle_env.sh
NCU=/usr/local/cuda/bin/ncu
for v in wide:12 pair:24 n128:0; do
  tag=${v%:*}; skip=${v#*:}
  PENSTOCK_FP8_BENCH_SHAPE="dsv3 down" PENSTOCK_FP8_BENCH_T=16384 timeout 200 $NCU --clock-control none \
    -k regex:fp8_gemm_tma_kernel --launch-skip $skip --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no \
    -o $O/src.$tag $P/bin/penstock_bench_kernels --only fp8 > $O/src.$tag.log 2>&1
  echo "ncu $tag rc $? at ${SECONDS}s"; tail -1 $O/src.$tag.log
  $NCU -i $O/src.$tag.ncu-rep --page source --print-source sass --csv > $O/src.$tag.sass.csv 2> $O/src.$tag.sass.err
  $NCU -i $O/src.$tag.ncu-rep --page details > $O/src.$tag.details.txt 2>&1
  echo "  sass rows $(wc -l < $O/src.$tag.sass.csv); $(grep -E '^  [a-zA-Z_].*\(' $O/src.$tag.details.txt | cut -c1-110)"
  grep -E "Duration|Warp Cycles Per Issued|Avg. Active Threads" $O/src.$tag.details.txt | head -4
done
cd $O && tar czf ${OUT:-/tmp}/s28c.tgz src.*.csv src.*.txt src.*.log src.*.err
