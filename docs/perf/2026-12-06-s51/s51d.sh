#!/usr/bin/env bash
# Session 51, call D (any GPU). Archive s51d holds four penstock_bench_kernels builds (14b52ff's probe; the GEMM as
# landed + the patch):
#   s51d: the wgmma probe in 384-thread CTAs (a third warpgroup idle with setmaxnreg 40 / 232, as the GEMMs launch),
#         the FP8 GEMMs as landed;
#   s51e: diag_loads.patch with PENSTOCK_FP8_DIAG_LOADS 1: the FP8 GEMM's producer loads nothing after the ring's
#         first fill (the consumers compute on stale operands: timing only);
#   s51f: the same with 2: every k-step loads the tile's first k block (the same TMA bytes into shared memory, all L2
#         hits);
#   s51g: the same with 3: the consumers skip the epilogue stores (the products stay live; no output).
# 1. the probe (s51d); 2. the DeepSeek-V3 expert GEMMs at T = 16384 (--only fp8), s51d / e / f / g in turn, 3 rounds.
set -uo pipefail
NAME=s51d; O=/tmp/out.s51d; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s51d.tgz" *.log *.jsonl 2>/dev/null; cd - > /dev/null; }
/tmp/s/s51d/bin/penstock_bench_kernels --only wgmma_probe > "${O}/probe.jsonl" 2> "${O}/probe.log"
echo "probe rc $? at ${SECONDS}s"
probe_lines "${O}/probe.jsonl"
save
for r in 1 2 3; do
  for b in s51d s51e s51f s51g; do
    PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=16384 timeout 120 "/tmp/s/$b/bin/penstock_bench_kernels" --only fp8 \
      > "$O/fp8.$r.$b.jsonl" 2> "$O/fp8.$r.$b.err.log"
    echo "fp8 bench $b round $r rc $? at ${SECONDS}s"; fp8_lines "$O/fp8.$r.$b.jsonl" "$b"
  done
done
save
