#!/usr/bin/env bash
# Session 27, call G: 16-byte epilogue stores in the bf16 grouped GEMM (grouped_gemm_tma.cu, plain and gated) and the
# quad transpose moved to tile_util.cuh: bf16 grouped / FP8 conformance; the grouped bench against s27a's binary
# (3b0d476's bf16 kernel); the DeepSeek-V3 bf16 layer and the Kimi K3 KDA bf16 layer at 16K against s26f's model
# bench, alternated.
set -uo pipefail
NAME=s27g; source tools/device_bundle_env.sh   # the tarball holds s27g, s27a and s26f
timeout 200 $P/bin/cuda_kernels_test --gtest_filter='Fp8TmaTest.*:Fp8Test.*:GemmOpTest.*:*GroupedGemmKernelTest*:GroupedGemmDeviceTest.*:KdaBf16OpTest.*' > $O/conf.log 2>&1
rc=$?
echo "tests rc $rc at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED"
grep -E "^\[  FAILED|\| FAIL|Failure|error" $O/conf.log | head -5
[ $rc -eq 0 ] || { cd $O && tar czf ${OUT:-/tmp}/s27g.tgz *; exit 0; }
for b in s27g s27a; do
  timeout 90 /tmp/s/$b/bin/penstock_bench_kernels --only grouped > $O/grouped.$b.jsonl 2>&1
  echo "grouped bench $b rc $? at ${SECONDS}s"
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        v = r.get('variant', '')
        if v in ('tma_dyn', 'tma_dyn_cluster', 'glu_dyn', 'glu_dyn_cluster', 'cublaslt'):
            print(f\"  {v:16s} {r.get('model','')[:12]:12s} {r.get('proj',''):8s} T{r.get('tokens')}: {r.get('time_us',0)/1000:.3f} ms {r.get('tflops',0):.0f}\")
" $O/grouped.$b.jsonl | head -40
done
layer() {  # bundle tag cfg layers reps extra...
  local b=$1 tag=$2 cfg=$3 lay=$4 reps=$5; shift 5
  timeout 100 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay --tokens 16384 --reps $reps \
    --breakdown "$@" --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (down {b.get('layer.moe.experts.down', 0):.2f}, gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f})\")" $O/$tag.$b.json 2>/dev/null)"
}
for round in 1 2; do
  for b in s27g s26f; do layer $b dsv3bf16.$round deepseek-v3.json 3:4 8; done
done
for b in s27g s26f; do layer $b k3kdabf16 kimi-k3.json 1:2 5; done
cd $O && tar czf ${OUT:-/tmp}/s27g.tgz *
