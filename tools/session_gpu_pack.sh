#!/usr/bin/env bash
# Packs what tools/session_gpu_check.sh needs into DEST (then DEST.tar.xz, which the device tool carries): the model
# bench bundle (tools/model_bench_pack.sh), the stripped cuda_kernels_test and penstock_bench_kernels with their
# libraries (cuDNN / CUDA / NCCL stay the machine's), and the scripts the check runs.
#   tools/session_gpu_pack.sh BUILD_DIR DEST          # e.g. build-cudnn build-dev-lead/sess
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=$1; dest=$2
bash "${ROOT}/tools/model_bench_pack.sh" "${build}" "${ROOT}/../shared/configs" "${dest}" >/dev/null
bash "${ROOT}/tools/pack_kernel_bins.sh" "${build}" "${dest}"
# The server, cuda_runtime_test and the multi-rank test binaries when built (tools/deep_pp_8gpu.sh, tools/gpu_multi_check.sh), with their
# libraries except OpenMPI's: the GPU machine's own OpenMPI 4 (mpirun and libmpi.so.40) serves them there.
skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libpthread|/libdl\.so|/librt\.so|libcuda\.so|libcudart|libcublas|libnccl|libnvidia|libcudnn|libnvrtc|libmpi|libopen-(rte|pal)|libpmix|libhwloc|libevent|/libz\.so|libudev'
for b in penstock nccl_communicator_test logits_diff cuda_runtime_test; do
  f=$(find "${build}" -name "${b}" -type f -perm -u+x | head -1)
  [ -n "${f}" ] || continue
  cp "${f}" "${dest}/bin/" && strip "${dest}/bin/${b}"
  ldd "${f}" | awk '/=> \//{print $3}' | grep -v -E "${skip}" | while read -r l; do cp -L "${l}" "${dest}/lib/"; done
done
mkdir -p "${dest}/tools"
cp "${ROOT}/tools/session_gpu_check.sh" "${ROOT}/tools/layer_ab.sh" "${ROOT}/tools/torch_layer_baseline.py" \
  "${ROOT}/tools/model_bench_table.py" \
  "${dest}/tools/"
# fla wheels (tools/model_bench_run.sh's WHEELS) for the K3 KDA torch composition, when downloaded to .whl/
if ls "${ROOT}"/.whl/*.whl >/dev/null 2>&1; then mkdir -p "${dest}/whl" && cp "${ROOT}"/.whl/*.whl "${dest}/whl/"; fi
tar -C "$(dirname "${dest}")" -cJf "${dest}.tar.xz" "$(basename "${dest}")"
du -sh "${dest}" "${dest}.tar.xz"
