#!/usr/bin/env bash
# How call C's bundle was made (session 57): the landed tree (de53f24) with session 52's A-from-registers patch and
# the 24 / 240 register split (a-regs-240.diff, the whole change against de53f24), built in build-cuda, packed with
# call A's bundle folder (s57a: de53f24's penstock_model_bench and penstock_bench_kernels) as the same-call baseline.
#   git apply docs/perf/2026-12-07-s57/a-regs-240.diff && ninja -C build-cuda penstock_bench_kernels cuda_kernels_test \
#     penstock_model_bench && bash docs/perf/2026-12-07-s57/pack_s57c.sh && git checkout src/kernels/cuda/fp8_gemm_tma.cu
set -euo pipefail
BUNDLE_BINS="penstock_model_bench penstock_bench_kernels cuda_kernels_test" tools/pack_session_bundle.sh build-cuda s57c \
  "de53f24 + a_regs.patch (A from registers in the 256-wide FP8 GEMMs) + setmaxnreg 24/240" s57a
