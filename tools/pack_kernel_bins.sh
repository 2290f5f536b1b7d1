#!/usr/bin/env bash
# Adds the GPU kernel binaries to a device bundle: stripped cuda_kernels_test, cuda_attention_cudnn_test and
# penstock_bench_kernels from BUILD_DIR
# into DEST/bin, and their shared libraries into DEST/lib except glibc's and the ones the GPU machine has (CUDA,
# cuBLAS, NCCL, cuDNN, NVRTC). Used by the *_run.sh pack steps and session_gpu_pack.sh.
#   tools/pack_kernel_bins.sh BUILD_DIR DEST
set -euo pipefail
build=$1; dest=$2
mkdir -p "${dest}/bin" "${dest}/lib"
cp "${build}/tests/kernels/cuda/cuda_kernels_test" "${build}/bench/penstock_bench_kernels" "${dest}/bin/"
strip "${dest}/bin/cuda_kernels_test" "${dest}/bin/penstock_bench_kernels"
if [ -x "${build}/tests/kernels/cuda/cuda_attention_cudnn_test" ]; then
  cp "${build}/tests/kernels/cuda/cuda_attention_cudnn_test" "${dest}/bin/" && strip "${dest}/bin/cuda_attention_cudnn_test"
fi
skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libpthread|/libdl\.so|/librt\.so|libcuda\.so|libcudart|libcublas|libnccl|libnvidia|libcudnn|libnvrtc'
for b in "${dest}/bin/"*; do
  ldd "${b}" | awk '/=> \//{print $3}' | grep -v -E "${skip}" | while read -r l; do cp -L "${l}" "${dest}/lib/"; done
done
