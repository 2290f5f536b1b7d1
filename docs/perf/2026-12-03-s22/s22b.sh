#!/usr/bin/env bash
# Session 22, call B (kAuto now takes kWgmmaPair for sparse calls): the sparse-MLA conformance again with the new
# dispatch, then the GLM-5.3 DSA layer (bf16 and native FP8 weights) at 16K beside its
# torch.compile composition in the same call; first the
# mla kernel bench (the pair kernel now scans each index list for its last valid key).
set -uo pipefail
N=${NAME:-s22b}  # the package (call C: NAME=s22c, s22c.sh)
mkdir -p /tmp/s && tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/$N; mkdir -p $O
LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64 timeout 90 $P/bin/penstock_bench_kernels --only mla --warmup 3 --reps 15 > $OUT/bench_mla.jsonl 2>&1
echo "mla bench rc $? at ${SECONDS}s"
python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if 'wgmma' in r['kernel']: print(r['bench'], r['kernel'], r['heads'], r.get('prefix'), round(r['time_us'], 1), round(r['tflops'], 1))
" $OUT/bench_mla.jsonl
PKG=$P OUT=$O FILTER='MlaTcOpTest.Sparse*:DsaOpTest.*' BENCHES="glm" TORCH_MODELS="glm-5.3" REPS=5 \
  TORCH_TIMEOUT=170 TORCH_TIMEOUT_KDA=260 \
  timeout 420 bash $P/tools/session_gpu_check.sh 2>&1 | grep -v "^ *warnings.warn\|UserWarning" | tail -30
echo "session check done at ${SECONDS}s"
cp $O/*.json $O/logs.tgz $OUT/ 2>/dev/null
