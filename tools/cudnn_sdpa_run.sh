#!/usr/bin/env bash
# On a lent H200: the cuDNN SDPA path's conformance (cuda_attention_cudnn_test), its speed beside the CUDA-core kernel
# (penstock_bench_kernels --only attention) and the same-run torch cuDNN SDPA baseline (tools/sdpa_baseline.py), and
# optionally (LAYER=1) the DeepSeek-V3 layer bench at 16K, which takes the same path. Logs go to $OUT. CONFORMANCE=0
# skips the test; ROUNDS=2 repeats the two timings in the order Penstock, torch, torch, Penstock.
#   PKG=build-cudnn/sdpapkg OUT=/tmp/o tools/cudnn_sdpa_run.sh     # PKG as tools/cudnn_sdpa_pack.sh packs it
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG="${PKG:-${ROOT}/build-cudnn/sdpapkg}"
OUT="${OUT:-./out}"
mkdir -p "${OUT}"
if [ ! -d "${PKG}" ] && [ -f "${PKG}.tar.xz" ]; then tar -C "$(dirname "${PKG}")" -xJf "${PKG}.tar.xz"; fi
# cuDNN for the binaries: the directory of torch's libcudnn.so.9 (its engine libraries sit beside it).
CUDNN_LIB="$(python3 - <<'PY'
import glob, os, site
import torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, "nvidia", "**", "libcudnn.so.9"), recursive=True)]
print(os.path.dirname(hits[0]) if hits else "")
PY
)"
BINLIB="${PKG}/lib:${CUDNN_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
{
  echo "# cudnn_sdpa_run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# checkout $(git -C "${ROOT}" rev-parse --short=12 HEAD 2>/dev/null) (the binaries print their own commit)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1
  python3 -c "import torch; print('# torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn',
torch.backends.cudnn.version())"
  echo "# cuDNN for the binaries: ${CUDNN_LIB}"; ls "${CUDNN_LIB}" 2>&1 | head -20
  LD_LIBRARY_PATH="${BINLIB}" ldd "${PKG}/bin/cuda_attention_cudnn_test" | grep -E "cudnn|nvrtc|not found"
} 2>&1 | tee "${OUT}/env.log"
if [ "${CONFORMANCE:-1}" = 1 ]; then
  echo "+ conformance"
  LD_LIBRARY_PATH="${BINLIB}" timeout 100 "${PKG}/bin/cuda_attention_cudnn_test" --gtest_color=no 2>&1 |
    tee "${OUT}/conformance.log" | grep -E "^\[conf\]|FAIL|PASSED|SKIPPED|warn|error" | head -80
fi
bench() {
  echo "+ attention bench"
  LD_LIBRARY_PATH="${BINLIB}" timeout 100 "${PKG}/bin/penstock_bench_kernels" --only attention 2>&1 |
    tee -a "${OUT}/bench_attention.log"
}
torch_sdpa() {
  echo "+ torch SDPA baseline"
  PYTHONUNBUFFERED=1 timeout 60 python3 "${ROOT}/tools/sdpa_baseline.py" 2>&1 | tee -a "${OUT}/torch_sdpa.log"
}
# ROUNDS=2 alternates the two sides (Penstock, torch, torch, Penstock) so that drift over the run shows.
bench
torch_sdpa
if [ "${ROUNDS:-1}" = 2 ]; then
  torch_sdpa
  bench
fi
if [ "${LAYER:-0}" = 1 ]; then
  echo "+ layer bench deepseek-v3 16384 (--skip-ops)"
  LD_LIBRARY_PATH="${BINLIB}" timeout 70 "${PKG}/bin/penstock_layer_bench" --config "${PKG}/configs/deepseek-v3.json" \
    --model-name deepseek-v3 --tokens "${TOKENS:-16384}" --skip-ops 2>&1 | tee "${OUT}/layer.log" | tail -8
fi
echo "+ done"
