#!/usr/bin/env bash
# Packs what tools/perf_layer_run.sh needs on a lent GPU machine that has CUDA 13 and torch but none of the build's
# other pieces: the stripped penstock_layer_bench, libstdc++ (the binary's only non-CUDA, non-glibc library; used by
# the binary alone, never exported to python), and the model configs.
#   tools/perf_layer_pack.sh BUILD_DIR CONFIG_DIR DEST     # e.g. build-h6 ../shared/configs build-h6/layerpkg
set -euo pipefail
build=$1; configs=$2; dest=$3
rm -rf "${dest}"
mkdir -p "${dest}/bin" "${dest}/lib" "${dest}/configs"
cp "${build}/bench/penstock_layer_bench" "${dest}/bin/"
strip "${dest}/bin/penstock_layer_bench"
cp -L "$(ldd "${build}/bench/penstock_layer_bench" | awk '/libstdc\+\+/{print $3}')" "${dest}/lib/"
cp "${configs}"/*.json "${dest}/configs/"
du -sh "${dest}"
