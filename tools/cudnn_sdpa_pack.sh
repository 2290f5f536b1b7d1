#!/usr/bin/env bash
# Packs what tools/cudnn_sdpa_run.sh needs on a lent GPU machine that has CUDA 13 and torch (with its own
# nvidia-cudnn package) but none of the build's other pieces: the stripped test and bench binaries of a build with the
# cuDNN SDPA path (PENSTOCK_CUDNN=ON), their shared libraries except glibc, CUDA's and cuDNN's own (cuDNN comes from
# the machine's torch: the run script finds it), and the model configs for the layer bench.
#   tools/cudnn_sdpa_pack.sh BUILD_DIR CONFIG_DIR DEST    # e.g. build-cudnn ../shared/configs build-cudnn/sdpapkg
set -euo pipefail
build=$1; configs=$2; dest=$3
rm -rf "${dest}"
mkdir -p "${dest}/bin" "${dest}/lib" "${dest}/configs"
for b in tests/kernels/cuda/cuda_attention_cudnn_test bench/penstock_bench_kernels bench/penstock_layer_bench; do
  cp "${build}/${b}" "${dest}/bin/"
  strip "${dest}/bin/$(basename "${b}")"
done
skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libpthread|/libdl\.so|/librt\.so'
skip="${skip}|libcuda\.so|libcudart|libcublas|libnvrtc|libcudnn|libnvidia"
for o in "${dest}"/bin/*; do ldd "${o}" | awk '/=> \//{print $3}'; done | sort -u | grep -v -E "${skip}" |
  while read -r l; do cp -L "${l}" "${dest}/lib/"; done
if [ -d "${configs}" ]; then cp "${configs}"/deepseek-v3.json "${dest}/configs/" 2>/dev/null || true; fi
tar -C "$(dirname "${dest}")" -cJf "${dest}.tar.xz" "$(basename "${dest}")"
du -sh "${dest}" "${dest}.tar.xz"
