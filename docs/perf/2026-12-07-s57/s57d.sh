#!/usr/bin/env bash
# Session 57, call D (any GPU): DeepGEMM as the same-call baseline of Penstock's FP8 expert GEMMs, after call A's build
# crashed on its first tensor call. A SIGSEGV handler preloaded into python prints the native frames (addr2line
# resolves them). That showed the crash inside the extension's own copy of libstdc++'s stream code: the default
# toolchain's g++ wrapper (/opt/gcc/bin/g++) linked it in. Built with the system g++ (/usr/bin/g++, libstdc++.so.6
# shared), DeepGEMM v2.1.1.post3 (c9f8b34, 2025-10-15, the same CUTLASS / fmt pins; build-dg/dg211.tar.xz) runs.
# Then deepgemm_grouped.py (FP8 and bf16 m-grouped GEMMs) and Penstock's kernel bench (s57a, de53f24) at T 16384 on
# the same offsets (call A's, from raw/s57a-call2.tgz). Session 57 ran these steps as five commands on one warm
# machine (calls D1-D5 on the page); this script is their sequence with the fixed build.
#   run: bash docs/perf/2026-12-07-s57/s57d.sh, carry build-dev-lead/s57a.tar.xz build-dg
set -uo pipefail
NAME=s57a; O=/tmp/out.s57d; export DG_CC=/usr/bin/gcc DG_CXX=/usr/bin/g++; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s57d.tgz" *.log *.jsonl *.txt 2>/dev/null; cd - > /dev/null; }
R=$(pwd); export CUDA_HOME=/usr/local/cuda
tar -xzf docs/perf/2026-12-07-s57/raw/s57a-call2.tgz -C "$O" off
cat > /tmp/segv.c <<'C'
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>
static void on_segv(int s) { void* b[64]; int n = backtrace(b, 64); backtrace_symbols_fd(b, n, 2); _exit(128 + s); }
__attribute__((constructor)) static void install(void) { signal(SIGSEGV, on_segv); }
C
gcc -shared -fPIC -O1 -o /tmp/segv.so /tmp/segv.c && echo "segv.so built"
cat > /tmp/tiny.py <<'PY'
import torch, deep_gemm
from deep_gemm.utils import per_token_cast_to_fp8, per_block_cast_to_fp8
x = torch.randn(256, 512, device='cuda', dtype=torch.bfloat16); w = torch.randn(256, 512, device='cuda', dtype=torch.bfloat16)
d = torch.empty(256, 256, device='cuda', dtype=torch.bfloat16)
print('calling bf16_gemm_nt', flush=True)
deep_gemm.bf16_gemm_nt(x, w, d); torch.cuda.synchronize()
print('bf16 ok', (d.float() - x.float() @ w.float().t()).abs().max().item(), flush=True)
a = per_token_cast_to_fp8(x, use_ue8m0=False); b = per_block_cast_to_fp8(w, use_ue8m0=False)
deep_gemm.fp8_gemm_nt(a, b, d); torch.cuda.synchronize()
print('fp8 ok', (d.float() - x.float() @ w.float().t()).abs().max().item(), flush=True)
PY
build() {  # build TARBALL DIR: DeepGEMM's extension in place
  mkdir -p "/tmp/$2" && tar -xJf "build-dg/$1" -C "/tmp/$2"
  cd "/tmp/$2/DeepGEMM" && rm -rf build ./*.so deep_gemm/*.so && cp -r third-party/cutlass/include/cute third-party/cutlass/include/cutlass deep_gemm/include/ \
    && echo 'persistent_envs = dict()' > deep_gemm/envs.py
  # DG_CXX=/usr/bin/g++: the system compiler for compile and link (the default toolchain's g++ wrapper linked the
  # extension with its own libstdc++ parts, which crashed in a stringstream at import: calls D1 and D2)
  CC=${DG_CC:-gcc} CXX=${DG_CXX:-g++} LDSHARED="${DG_CXX:-g++} -shared" MAX_JOBS=16 timeout 200 python3 setup.py \
    build_ext --inplace > "$O/build.$2.log" 2>&1; echo "build $2 rc $? at ${SECONDS}s"
  cd "$R"
}
tiny() {  # tiny DIR: the small GEMMs under the SIGSEGV handler; the native frames resolved
  LD_PRELOAD=/tmp/segv.so DG_JIT_DEBUG=1 DG_PRINT_CONFIGS=1 PYTHONPATH="/tmp/$1/DeepGEMM" DG_JIT_CACHE_DIR="/tmp/dgc.$1" \
    timeout 150 python3 /tmp/tiny.py > "$O/tiny.$1.txt" 2>&1
  local rc=$?; echo "tiny $1 rc ${rc} at ${SECONDS}s"; grep -v "^\s*$" "$O/tiny.$1.txt" | tail -30 | cut -c1-220
  for so in $(grep -o "/tmp/$1/[^ (]*\.so" "$O/tiny.$1.txt" | sort -u); do
    grep -o "${so}(+0x[0-9a-f]*)" "$O/tiny.$1.txt" | sed 's/.*(+\(0x[0-9a-f]*\))/\1/' | xargs -r addr2line -f -C -e "${so}" \
      | paste - - | cut -c1-200 | head -20
  done
  return ${rc}
}
pen() {
  PENSTOCK_FP8_OFFSETS_DIR=$O/off PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=16384 timeout 100 \
    "$P/bin/penstock_bench_kernels" --only fp8 > "$O/$1.jsonl" 2> "$O/$1.err"
  echo "pen $1 rc $? at ${SECONDS}s"
  python3 - "$O/$1.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r = json.loads(l)
    if r.get('bench', '').startswith('fp8_grouped'):
        print(f"  {r['shape']:26s} {r.get('variant', ''):18s} {r.get('time_us', 0):9.1f} us {r.get('tflops', 0):7.1f} TFLOP/s")
PY
}
dg() {
  DG_PRINT_CONFIGS=1 PYTHONPATH="/tmp/$2/DeepGEMM" DG_JIT_CACHE_DIR="/tmp/dgc.$2" timeout "${DG_TIMEOUT:-200}" python3 \
    docs/perf/2026-12-07-s57/deepgemm_grouped.py "$O/off" 16384 > "$O/$1.jsonl" 2> "$O/$1.err"
  echo "dg $1 rc $? at ${SECONDS}s"; tail -2 "$O/$1.err" | cut -c1-200
  python3 - "$O/$1.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    try:
        r = json.loads(l)
    except ValueError:
        print('  dg:', l.rstrip()[:220]); continue
    if 'error' in r:
        print('  dg error:', r)
    elif 'shape' in r:
        kind = 'bf16' if r['bench'].endswith('bf16') else 'fp8 '
        print(f"  {r['shape']:26s} deepgemm {kind} kineto {r['kernel_us_kineto']:9.1f} us {r['tflops_kineto']:7.1f} | "
              f"events {r['events_median_us']:9.1f} us {r['tflops_events']:7.1f} TFLOP/s | padded {r['padded_rows']} | "
              f"err {r['max_rel_err_32rows']:.2e}")
PY
}
build dg211.tar.xz dg211; save
if tiny dg211; then
  save; DG_SKIP_BF16=1 DG_TIMEOUT=110 dg dg1 dg211; save; pen pen1; save; DG_TIMEOUT=150 dg dg2 dg211; save
else
  save
fi
date -u
