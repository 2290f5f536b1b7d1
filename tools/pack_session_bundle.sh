#!/usr/bin/env bash
# Packs a device-call bundle for the perf scripts (docs/perf/<date>/sNNx.sh, which source tools/device_bundle_env.sh):
# build-dev-lead/NAME/{bin,lib,configs,COMMIT} from BUILD_DIR (the GPU test and bench binaries, stripped: what
# tools/pack_kernel_bins.sh takes, plus penstock_model_bench and cuda_runtime_test when built; their shared libraries
# except glibc's and the GPU machine's own; the real-dimension configs), then build-dev-lead/NAME.tar.xz holding it and
# any earlier bundle folders named after it (same-run baselines). xz with a 192 MiB dictionary stores binaries built
# from nearly the same sources about once. The carry limit (64 MiB) also counts the tracked tree (~43 MiB by session 44),
# so set BUNDLE_BINS to the binaries the call's script runs: the archive then holds only those (of every folder; the
# folders themselves stay whole; only the first keeps lib/ and configs/, so a script sources device_bundle_env.sh
# with NAME set to it), about 14 MiB for three kernel binaries and a baseline's two.
#   tools/pack_session_bundle.sh BUILD_DIR NAME "commit / what" [BASELINE_BUNDLE ...]   # e.g. build-cuda s27f "..." s26f
#   BUNDLE_BINS="cuda_kernels_test penstock_bench_kernels penstock_model_bench" tools/pack_session_bundle.sh ...
set -euo pipefail
build=$1; name=$2; what=$3; shift 3
root=build-dev-lead
dest=${root}/${name}
rm -rf "${dest}"
mkdir -p "${dest}/bin" "${dest}/lib" "${dest}/configs"
# The model bench and the runtime test go in first, so that pack_kernel_bins.sh copies their shared libraries with the
# kernel binaries' (the model bench links spdlog, which the kernel binaries do not).
for b in penstock_model_bench cuda_runtime_test; do
  f=$(find "${build}" -name "${b}" -type f -perm -u+x | head -1)
  if [ -n "${f}" ]; then cp "${f}" "${dest}/bin/" && strip "${dest}/bin/${b}"; fi
done
"$(dirname "$0")/pack_kernel_bins.sh" "${build}" "${dest}" > /dev/null
rm -f "${dest}"/lib/libdl* "${dest}"/lib/libpthread* "${dest}"/lib/librt*
cp ../shared/configs/*.json "${dest}/configs/"
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src bench || echo ' + work tree'): ${what}" > "${dest}/COMMIT"
for b in "$@"; do [ -d "${root}/${b}" ] || { echo "pack: no bundle folder ${root}/${b}" >&2; exit 1; }; done
if [ -z "${BUNDLE_BINS:-}" ]; then
  tar -C "${root}" -cf - "${name}" "$@" | xz -T2 --lzma2=preset=9,dict=192MiB > "${root}/${name}.tar.xz"
else
  # the named binaries of each folder, with the first folder's lib/ and configs/ (the scripts' LD path and configs)
  stage=$(mktemp -d)
  trap 'rm -rf "${stage}"' EXIT
  first=1
  for f in "${name}" "$@"; do
    mkdir -p "${stage}/${f}/bin"
    cp "${root}/${f}/COMMIT" "${stage}/${f}/"
    if [ "${first}" = 1 ]; then cp -r "${root}/${f}/lib" "${root}/${f}/configs" "${stage}/${f}/"; first=0; fi
    for b in ${BUNDLE_BINS}; do
      if [ -f "${root}/${f}/bin/${b}" ]; then cp "${root}/${f}/bin/${b}" "${stage}/${f}/bin/"; fi
    done
  done
  tar -C "${stage}" -cf - "${name}" "$@" | xz -T2 --lzma2=preset=9,dict=192MiB > "${root}/${name}.tar.xz"
fi
ls -la "${root}/${name}.tar.xz"
