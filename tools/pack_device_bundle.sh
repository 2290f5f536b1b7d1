#!/usr/bin/env bash
# Packs what tools/gpu_multi_check.sh needs on a lent GPU machine that has the CUDA toolkit and NCCL but none of the
# project's other dependencies: the binaries, their shared libraries except glibc and CUDA's own (ldd), OpenMPI
# (mpirun, orted, components, help files: unpacked at their Debian paths only where that machine has no mpirun) and
# the fixtures. The bundle folder travels with the device tool's `carry`.
#   tools/pack_device_bundle.sh BUILD_DIR FIXTURES_DIR DEST      # e.g. build-h4 ../shared/fixtures build-h4/devpkg
# On the device: bash DEST/setup.sh (prints the exports to eval: LD_LIBRARY_PATH, MPIRUN, BIN, FIXTURES).
set -euo pipefail
build=$1; fixtures=$2; dest=$3
rm -rf "${dest}"
mkdir -p "${dest}/bin" "${dest}/lib" "${dest}/fixtures"
# penstock is required; the test binaries are packed when built (tools/gpu_forward_check.py needs only penstock).
for b in penstock nccl_communicator_test logits_diff; do
  f=$(find "${build}" -name "${b}" -type f -perm -u+x | head -1)
  if [ -z "${f}" ]; then
    [ "${b}" = penstock ] && { echo "pack: ${b} not built in ${build}" >&2; exit 1; }
    echo "pack: ${b} not built in ${build}: left out" >&2
    continue
  fi
  cp "${f}" "${dest}/bin/"
done
# OpenMPI's own files (Debian packages), without documentation, Java and Fortran bindings.
ompi_files=$(dpkg -L libopenmpi3 openmpi-bin openmpi-common libpmix2 2>/dev/null |
  grep -v -E "/(doc|man|lintian)/|java|fortran|mpifh|usempi|\.mod$" | while read -r p; do [ -f "$p" ] && echo "$p"; done)
tar -czf "${dest}/ompi.tar.gz" -P ${ompi_files} /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/orterun /etc/openmpi 2>/dev/null || true
# Shared libraries: the closure of the binaries and of OpenMPI's libraries and components.
# glibc, the C++ runtime and zlib/udev (newer on the GPU machine), and CUDA's own libraries stay the machine's.
skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libpthread|/libdl\.so|/librt\.so|libstdc\+\+|libgcc_s|/libz\.so|libudev|libcuda\.so|libcudart|libcublas|libnccl|libnvidia'
objs="${dest}/bin/* $(echo "${ompi_files}" | grep -E '\.so|/bin/' || true)"
for o in ${objs}; do ldd "${o}" 2>/dev/null | awk '/=> \//{print $3}' || true; done | sort -u | grep -v -E "${skip}" |
  while read -r l; do cp -L "${l}" "${dest}/lib/"; done
# OpenMPI's libraries apart: used only with the bundle's own mpirun (a machine's OpenMPI 4 keeps its own).
mkdir -p "${dest}/lib-mpi"
for l in "${dest}"/lib/lib{mpi,open-rte,open-pal,pmix,mca_common,hwloc,event,oshmem}*; do
  if [ -f "$l" ]; then mv "$l" "${dest}/lib-mpi/"; fi
done
for m in deepseek_v3_tiny deepseek_v3_tiny_fp8 glm_moe_dsa_tiny kimi_linear_tiny; do
  if [ -d "${fixtures}/${m}" ]; then cp -r "${fixtures}/${m}" "${dest}/fixtures/"; fi
done
cat >"${dest}/setup.sh" <<'SETUP'
# Sourced on the device: finds NCCL and mpirun there, or unpacks the bundle's OpenMPI (never over existing files).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
nccl_dir=$(dirname "$( (ls /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/lib/libnccl.so.2 2>/dev/null; find / -xdev -name 'libnccl.so.2' 2>/dev/null) | head -1)")
export LD_LIBRARY_PATH="${here}/lib:/usr/local/cuda/lib64:${nccl_dir}:${LD_LIBRARY_PATH:-}"
if command -v mpirun >/dev/null 2>&1 && mpirun --version 2>&1 | grep -q "Open MPI) 4\."; then
  echo "setup: the machine's OpenMPI 4: $(command -v mpirun)"
else
  command -v mpirun >/dev/null 2>&1 && echo "setup: the machine's mpirun is no OpenMPI 4: $(mpirun --version 2>&1 | head -1)"
  tar -xzf "${here}/ompi.tar.gz" -P --skip-old-files 2>/dev/null
  export LD_LIBRARY_PATH="${here}/lib-mpi:${LD_LIBRARY_PATH}" PATH="/usr/bin:${PATH}"
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_mca_base_component_show_load_errors=0
  echo "setup: unpacked the bundle's OpenMPI 4.1 at its Debian paths"
fi
export MPIRUN=/usr/bin/mpirun BIN="${here}/bin" FIXTURES="${here}/fixtures"
command -v mpirun >/dev/null 2>&1 && MPIRUN=$(command -v mpirun)
echo "setup: NCCL from ${nccl_dir}; MPIRUN=${MPIRUN}"
SETUP
# One compressed file travels (the device tool carries at most 64 MiB with the working tree).
tar -C "$(dirname "${dest}")" -cJf "${dest}.tar.xz" "$(basename "${dest}")"
du -sh "${dest}" "${dest}.tar.xz"
