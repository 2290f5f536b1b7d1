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
timeout 60 "${bin}/cuda_kernels_test" \
  --gtest_filter='MlaTcOpTest.*:AttentionOpTest.*:DsaOpTest.SparseMla*' 2>&1 | tee "${out}/conformance.log" |
  grep -E '\| FAIL$|FAILED|PASSED|Failure|error' | head -60
for v in dispatch mma.sync wgmma; do
  echo "variant ${v}: pass $(grep -E "\[${v}[],]" "${out}/conformance.log" | grep -c '| PASS$') fail $(grep -E "\[${v}[],]" "${out}/conformance.log" | grep -c '| FAIL$') worst $(grep -E "\[${v}[],]" "${out}/conformance.log" | grep ' out |' | awk -F'max\\|d\\| ' '{split($2,a," "); if (a[1]+0 > m) m = a[1]+0} END {print m}')"
done
echo "conf lines: $(grep -c '^\[conf\]' "${out}/conformance.log") pass: $(grep -c '| PASS$' "${out}/conformance.log") fail: $(grep -c '| FAIL$' "${out}/conformance.log")"
echo "== bench"
timeout 60 "${bin}/penstock_bench_kernels" --only mla --warmup 3 --reps 15 > "${out}/bench.jsonl" 2>&1
grep -v '^{' "${out}/bench.jsonl" | head -20
echo "== sass"
if command -v cuobjdump >/dev/null; then
  cuobjdump --dump-sass "${bin}/cuda_kernels_test" 2>/dev/null |
    awk '/Function : /{p = ($0 ~ /mla_(tc|wgmma)_kernel/)} p' > "${out}/sass_mla_tc.txt"
  for k in mla_tc_kernel mla_wgmma_kernel; do
    awk -v k="$k" '/Function : /{p = ($0 ~ k)} p' "${out}/sass_mla_tc.txt" > /tmp/sass_k.txt
    echo "$k (3 instances): SASS lines $(wc -l < /tmp/sass_k.txt) HMMA $(grep -c HMMA /tmp/sass_k.txt) HGMMA $(grep -c HGMMA /tmp/sass_k.txt) LDSM $(grep -c LDSM /tmp/sass_k.txt) LDGSTS $(grep -c LDGSTS /tmp/sass_k.txt) LDL/STL $(grep -c -E 'LDL|STL' /tmp/sass_k.txt)"
  done
fi
echo "== racecheck (per kernel, capped)"
if command -v compute-sanitizer >/dev/null; then
  for spec in "mla_wgmma_kernel Sparse 35" "mla_wgmma_kernel Dense 25" "mla_tc_kernel Sparse 20"; do
    set -- ${spec}
    log="${out}/racecheck_${1}_${2}.log"
    timeout "$3" compute-sanitizer --tool racecheck --racecheck-report all --kernel-name "kns=$1" \
      "${bin}/cuda_kernels_test" --gtest_filter="MlaTcOpTest.${2}*" > "${log}.full" 2>&1
    head -c 1000000 "${log}.full" > "${log}"; rm -f "${log}.full"
    echo "racecheck $1 $2: conf lines $(grep -c '^\[conf\]' "${log}"), hazards $(grep -c 'hazard detected' "${log}"), $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "${log}" | tail -1)"
    grep -E "mla_(tc|wgmma).cu:[0-9]+" "${log}" | sed 's/.* in //' | sort | uniq -c | head -6
  done
fi
echo "== summary"
python3 - "${out}/bench.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"): continue
    r = json.loads(line)
    print(f"{r['bench']:10s} {r['kernel']:24s} H{r['heads']:<4d} prefix {r.get('prefix', 0):>6} "
          f"{r['time_us']:>10.1f} us {r['tflops']:7.1f} TFLOP/s ({r['pct_of_bf16_peak']:.1f}%) "
          f"diff {r.get('max_abs_diff_vs_old', float('nan')):.2e} speedup {r.get('speedup_vs_old', float('nan')):.1f}")
PY
