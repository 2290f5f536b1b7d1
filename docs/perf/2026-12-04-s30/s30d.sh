#!/usr/bin/env bash
# Session 30, call D: the SASS of the head quantisers (s30c), to see where the per-row q quantiser's instructions go.
set -uo pipefail
NAME=s30c; source tools/device_bundle_env.sh
cuobjdump -sass -fun '_ZN8penstock4cuda52_GLOBAL__N__22ae3f60_19_fp8_tensor_scale_cu_9ecd042e17head_quant_kernelI13__nv_bfloat16Li8ELb1ELi4ELb0EEEvPhPfPKT_S8_NS1_13HeadQuantArgsEi' $P/bin/penstock_bench_kernels > $O/hq_row.sass 2>&1
echo "rc $? $(wc -l < $O/hq_row.sass) lines"
cuobjdump -sass $P/bin/penstock_bench_kernels 2>/dev/null | awk '/Function : .*head_quant_kernel/{p=1} /Function : /{if ($0 !~ /head_quant_kernel/) p=0} p' > $O/hq_all.sass
echo "all: $(wc -l < $O/hq_all.sass) lines; $(grep -c 'Function :' $O/hq_all.sass) functions"
grep 'Function :' $O/hq_all.sass | head -20
cd $O && tar czf ${OUT:-/tmp}/s30d.tgz *.sass
