#!/usr/bin/env bash
# Session 27, call F: the final FP8 GEMM epilogue code (16-byte stores; the stagger removed): FP8 conformance and the
# runtime tests; the DeepSeek-V3 FP8 layer (+ --fp8-attention) and the Kimi K3 KDA FP8 layer (SiTU gated epilogue) at
# 16K against s26f's model bench (f6b5439: the same FP8 GEMM as 3b0d476), alternated.
set -uo pipefail
NAME=s27f; source tools/device_bundle_env.sh   # the tarball holds s27f and s26f
timeout 150 $P/bin/cuda_kernels_test --gtest_filter='Fp8TmaTest.*:Fp8Test.*' > $O/conf.log 2>&1
rc=$?
echo "Fp8 tests rc $rc at ${SECONDS}s: $(grep -c '^\[       OK' $O/conf.log) OK, $(grep -c '^\[  FAILED  \].*(' $O/conf.log) FAILED"
grep -E "^\[  FAILED|\| FAIL|Failure|error" $O/conf.log | head -5
timeout 100 $P/bin/cuda_runtime_test > $O/runtime.log 2>&1
echo "cuda_runtime_test rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $O/runtime.log | tr '\n' ' ')"
[ $rc -eq 0 ] || { cd $O && tar czf ${OUT:-/tmp}/s27f.tgz *; exit 0; }
layer() {  # bundle tag cfg layers reps extra...
  local b=$1 tag=$2 cfg=$3 lay=$4 reps=$5; shift 5
  timeout 100 /tmp/s/$b/bin/penstock_model_bench --config $P/configs/$cfg --layers $lay --tokens 16384 --reps $reps \
    --fp8-weights native --breakdown "$@" --json $O/$tag.$b.json > $O/$tag.$b.log 2>&1
  echo "$tag $b rc $? at ${SECONDS}s: $(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r['breakdown']}
print(f\"{r['median_ms']:.2f} ms (down {b.get('layer.moe.experts.down', 0):.2f}, gate_up_act {b.get('layer.moe.experts.gate_up_act', 0):.2f})\")" $O/$tag.$b.json 2>/dev/null)"
}
for round in 1 2; do
  for b in s27f s26f; do layer $b dsv3.$round deepseek-v3.json 3:4 8 --fp8-attention; done
done
for round in 1 2; do
  for b in s27f s26f; do layer $b k3kda.$round kimi-k3.json 1:2 5; done
done
cd $O && tar czf ${OUT:-/tmp}/s27f.tgz *
