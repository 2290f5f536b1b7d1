#!/usr/bin/env bash
# Packs tools/model_bench_run.sh's binary (stripped penstock_model_bench), its libstdc++ and the model configs.
#   tools/model_bench_pack.sh BUILD_DIR CONFIG_DIR DEST
set -euo pipefail
build=$1; configs=$2; dest=$3
rm -rf "${dest}"; mkdir -p "${dest}/bin" "${dest}/lib" "${dest}/configs"
cp "${build}/bench/penstock_model_bench" "${dest}/bin/"
strip "${dest}/bin/penstock_model_bench"
cp -L "$(ldd "${build}/bench/penstock_model_bench" | awk '/libstdc\+\+/{print $3}')" "${dest}/lib/"
cp "${configs}"/*.json "${dest}/configs/"
git -C "$(dirname "${BASH_SOURCE[0]}")/.." rev-parse --short=12 HEAD >"${dest}/COMMIT"
du -sh "${dest}"
