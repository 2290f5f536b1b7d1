#!/usr/bin/env bash
# Packs tools/model_bench_run.sh's binary (stripped penstock_model_bench), its libstdc++ and the model configs.
#   tools/model_bench_pack.sh BUILD_DIR CONFIG_DIR DEST
set -euo pipefail
build=$1; configs=$2; dest=$3
rm -rf "${dest}"; mkdir -p "${dest}/bin" "${dest}/lib" "${dest}/configs"
cp "${build}/bench/penstock_model_bench" "${dest}/bin/"
strip "${dest}/bin/penstock_model_bench"
# Its shared libraries except glibc's, CUDA's and cuDNN's own (the GPU machine has those; model_bench_run.sh finds
# torch's cuDNN): libstdc++, spdlog, fmt, OpenBLAS, ...
skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libpthread|/libdl\.so|/librt\.so|libcuda\.so|libcudart|libcublas|libnccl|libnvidia|libcudnn|libnvrtc'
ldd "${build}/bench/penstock_model_bench" | awk '/=> \//{print $3}' | grep -v -E "${skip}" | while read -r l; do cp -L "${l}" "${dest}/lib/"; done
cp "${configs}"/*.json "${dest}/configs/"
git -C "$(dirname "${BASH_SOURCE[0]}")/.." rev-parse --short=12 HEAD >"${dest}/COMMIT"
du -sh "${dest}"
