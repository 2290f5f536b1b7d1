#!/usr/bin/env bash
# Session 29, call C: SASS of the FP8 attention kernel (192 / 128, bf16 out, q in registers) and the bf16 one
# (192 / 128), persistent (s29b) against the per-CTA kernels (s28h), to find why the persistent ones run 3-5% slower
# at T = 16384 with an unchanged MMA-only probe.
set -uo pipefail
NAME=s29b; source tools/device_bundle_env.sh
for b in s29b s28h; do
  cuobjdump -sass /tmp/s/$b/bin/penstock_bench_kernels > $O/all.$b.sass 2>&1
  for k in 'attention_fp8_kernelILi192ELi128E13__nv_bfloat16Lb1E' 'attention_bf16_kernelILi192ELi128E'; do
    awk -v pat="$k" '/Function : /{p = index($0, pat) > 0} p' $O/all.$b.sass > $O/$b.${k:10:4}.sass
    echo "$b $k: $(wc -l < $O/$b.${k:10:4}.sass) lines, max register R$(grep -o 'R[0-9]*' $O/$b.${k:10:4}.sass | tr -d R | sort -n | tail -1)"
  done
  rm -f $O/all.$b.sass
done
cd $O && tar czf ${OUT:-/tmp}/s29c.tgz *.sass
