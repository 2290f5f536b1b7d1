#!/usr/bin/env bash
# Packs and runs the tensor-core MLA attention checks (issue 7) on a lent GPU machine.
#   here:   tools/mla_tc_device_check.sh pack BUILD_DIR      # -> BUILD_DIR/mlapkg.tar.xz (carry it)
#   device: tools/mla_tc_device_check.sh run BUILD_DIR       # conformance, bench, SASS count, racecheck -> $OUT
# The bundle holds cuda_kernels_test and penstock_bench_kernels plus their non-system, non-CUDA shared libraries
# (OpenBLAS and its Fortran runtime); glibc, libstdc++ and CUDA's libraries stay the machine's.
set -uo pipefail
mode=$1; build=$2
if [ "${mode}" = pack ]; then
  set -e
  dest="${build}/mlapkg"
  rm -rf "${dest}"; mkdir -p "${dest}/bin" "${dest}/lib"
  cp "${build}/tests/kernels/cuda/cuda_kernels_test" "${build}/bench/penstock_bench_kernels" "${dest}/bin/"
  strip "${dest}"/bin/*
  skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libpthread|/libdl\.so|/librt\.so|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas'
  for b in "${dest}"/bin/*; do ldd "$b" | awk '/=> \//{print $3}'; done | sort -u | grep -v -E "${skip}" |
    while read -r l; do cp -L "$l" "${dest}/lib/"; done
  tar -C "${build}" -cJf "${build}/mlapkg.tar.xz" mlapkg
  du -sh "${dest}" "${build}/mlapkg.tar.xz"
  exit 0
fi
out=${OUT:-/tmp/mla_out}; mkdir -p "${out}"
tar -C /tmp -xJf "${build}/mlapkg.tar.xz"
export LD_LIBRARY_PATH=/tmp/mlapkg/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
bin=/tmp/mlapkg/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "${out}/gpu.txt"
git log -1 --format='commit %H' 2>/dev/null | tee -a "${out}/gpu.txt"
echo "== conformance"
timeout 150 "${bin}/cuda_kernels_test" \
  --gtest_filter='MlaTcOpTest.*:AttentionOpTest.*:DsaOpTest.SparseMla*' 2>&1 | tee "${out}/conformance.log" |
  grep -E '^\[conf\]|FAILED|PASSED|Failure|error' | head -200
echo "conf lines: $(grep -c '^\[conf\]' "${out}/conformance.log") pass: $(grep -c '| PASS$' "${out}/conformance.log") fail: $(grep -c '| FAIL$' "${out}/conformance.log")"
echo "== bench"
timeout 150 "${bin}/penstock_bench_kernels" --only mla --warmup 3 --reps 15 2>&1 | tee "${out}/bench.jsonl"
echo "== sass"
if command -v cuobjdump >/dev/null; then
  cuobjdump --dump-sass "${bin}/cuda_kernels_test" 2>/dev/null |
    awk '/Function : /{p = ($0 ~ /mla_tc_kernel/)} p' > "${out}/sass_mla_tc.txt"
  echo "mla_tc kernels (3 instances) SASS lines $(wc -l < "${out}/sass_mla_tc.txt"): HMMA $(grep -c HMMA "${out}/sass_mla_tc.txt") LDSM $(grep -c LDSM "${out}/sass_mla_tc.txt") LDGSTS $(grep -c LDGSTS "${out}/sass_mla_tc.txt") LDL/STL $(grep -c -E 'LDL|STL' "${out}/sass_mla_tc.txt")"
fi
echo "== racecheck (sparse cases, 45 s cap)"
if command -v compute-sanitizer >/dev/null; then
  timeout 45 compute-sanitizer --tool racecheck --racecheck-report hazard "${bin}/cuda_kernels_test" \
    --gtest_filter='MlaTcOpTest.SparseMatchesReference' 2>&1 | tail -n 25 | tee "${out}/racecheck.log"
fi
