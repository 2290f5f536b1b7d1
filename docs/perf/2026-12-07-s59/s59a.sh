#!/usr/bin/env bash
# Session 59, call A (H100 or H200; one call). It ran with QUICK=1 and stopped at the conformance:
# Fp8TmaTest.GroupedGemm aborted with an illegal instruction (../2026-12-07-s59.md; next-debug.sh is the next step).
# What it times: the FP8 TMA GEMMs' scales through shared memory (pfE: the activation
# scales by TMA with each stage, the weight scales by cp.async; the 256-wide kernel, its CTA pairs, the gated GEMM and
# kWgmmaTmaN192) and session 58's L1 prefetch of the loaded scales (pfB: next-scale-prefetch.diff's src part), against
# HEAD 5e09bd7 (pfA). Bundle: build-dev-lead/pfE.tar.xz holds pfE, pfA, pfB (the three binaries each):
#   BUNDLE_BINS="penstock_model_bench penstock_bench_kernels cuda_kernels_test" tools/pack_session_bundle.sh build-cuda pfE "..." pfA pfB
# Steps: conformance of pfE (Fp8TmaTest.*: the reference cases, the n192 bytes against the wide kernel, the new
# ScaleSmemMatchesLoads), the kernel bench of the three interleaved three times (DeepSeek-V3 experts, T 16384), the
# DeepSeek-V3 FP8 layer with the default tiles (pfA, pfB, pfE) and with PENSTOCK_FP8_N192=1 (pfA, pfE) twice, then
# Nsight Compute on pfE's grouped n192 gate_up (the shape filter "dsv3 gate_up" skips the dense shared-expert gate_up).
# QUICK=1 (little device time left): two kernel-bench rounds, one layer round, no Nsight run.
#   run: bash docs/perf/2026-12-07-s59/s59a.sh, carry build-dev-lead/pfE.tar.xz
set -uo pipefail
NAME=pfE; O=/tmp/out.s59a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s59a.tgz" *.log *.json *.jsonl *.txt 2>/dev/null; cd - > /dev/null; }
conformance /tmp/s/pfE/bin/cuda_kernels_test 'Fp8TmaTest.*' 300 || { grep -E "FAILED|Failure" -A3 "$O/conf.log" | head -40; save; exit 0; }
grep -E "n192 vs wide|scales smem vs loads" "$O/conf.log"; save
pen() { fp8_grouped_bench "$1" "$2"; save; }  # tools/device_bundle_env.sh (moved there after call A, which stopped
# before its first use)
QUICK=${QUICK:-0}
for r in $([ "$QUICK" = 1 ] && echo 1 2 || echo 1 2 3); do pen pfA $r; pen pfB $r; pen pfE $r; done
for r in $([ "$QUICK" = 1 ] && echo 1 || echo 1 2); do
  for b in pfA pfB pfE; do layer "$b" "dsv3f8.$r" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; save; done
  for b in pfA pfE; do
    PENSTOCK_FP8_N192=1 layer "$b" "dsv3f8.n192.$r" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; save
  done
done
[ "$QUICK" = 1 ] && exit 0
PENSTOCK_FP8_BENCH_SHAPE="dsv3 gate_up" PENSTOCK_FP8_BENCH_T=16384 NCU_TIMEOUT=90 \
  ncu_sass "ncu_n192.pfE" n192 /tmp/s/pfE/bin/penstock_bench_kernels --only fp8; save
date -u
