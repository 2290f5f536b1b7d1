#!/usr/bin/env bash
# Adds what tools/gpu_forward_check.py needs to a session bundle folder and re-packs it (call B's s56b): penstock and
# logits_diff (stripped) with their shared libraries, in one archive with the bundle's binaries (xz stores their
# common kernels once). The carry limit (64 MiB with the ~41 MB tracked tree) has no room for the fixtures or
# tools/pack_device_bundle.sh's archive (OpenMPI, unstripped): the call checks the tracked tests/data variants.
#   BUNDLE_BINS="cuda_runtime_test penstock_model_bench" tools/pack_session_bundle.sh build-cuda s56b "..."
#   bash docs/perf/2026-12-07-s56/pack_s56b_forward.sh s56b
set -euo pipefail
name=$1; d=build-dev-lead/${name}
ninja -C build-cuda -j2 penstock logits_diff
for b in penstock logits_diff; do cp "$(find build-cuda -name "$b" -type f -perm -u+x | head -1)" "$d/bin/" && strip "$d/bin/$b"; done
skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libpthread|/libdl\.so|/librt\.so|/libz\.so|libudev|libcuda\.so|libcudart|libcublas|libnccl|libnvidia'
for l in $(ldd "$d/bin/penstock" | awk '/=> \//{print $3}' | grep -v -E "$skip"); do
  [ -f "$d/lib/$(basename "$l")" ] || cp -L "$l" "$d/lib/"
done
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/bin" && cp "$d/COMMIT" "$stage/$name/" && cp -r "$d/lib" "$d/configs" "$stage/$name/"
for b in ${BUNDLE_BINS:-cuda_runtime_test penstock_model_bench} penstock logits_diff; do cp "$d/bin/$b" "$stage/$name/bin/"; done
tar -C "$stage" -cf - "$name" | xz -T2 --lzma2=preset=9,dict=192MiB > "build-dev-lead/${name}.tar.xz"
du -sh "build-dev-lead/${name}.tar.xz"
