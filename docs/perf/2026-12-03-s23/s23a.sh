#!/usr/bin/env bash
# Session 23, call A: the sparse MLA kernel bench (kWgmmaPair with the index scan at the kernel's start beside
# kWgmmaPairFull, the same kernel without the trailing-pair skip, in the same process), the MLA / DSA conformance (first
# GPU run of the late-keys sparse cases and of kWgmmaPairFull), then the
# GLM-5.3 DSA layer at PERF.md's long-context anchor, a 64K-token prompt (T 65536, prefix 0), bf16 and native FP8
# weights with the FP8 indexer, beside its torch composition (eager and torch.compile) in the same call.
set -uo pipefail
N=${NAME:-s23a}
mkdir -p /tmp/s && tar -xJf build-dev-lead/$N.tar.xz -C /tmp/s
P=/tmp/s/$N; O=/tmp/$N; mkdir -p $O
set -f
LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64 timeout 90 $P/bin/penstock_bench_kernels --only mla --warmup 3 --reps 15 > $OUT/bench_mla.jsonl 2>&1
echo "mla bench rc $? at ${SECONDS}s"
python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if 'wgmma' in r['kernel']: print(r['bench'], r['kernel'], r['heads'], r.get('prefix'), round(r['time_us'], 1), round(r['tflops'], 1))
" $OUT/bench_mla.jsonl
PKG=$P OUT=$O FILTER='MlaTcOpTest.*:DsaOpTest.*' BENCHES="glm" TORCH_MODELS="glm-5.3" T=65536 REPS=3 \
  TORCH_TIMEOUT=300 timeout 450 bash $P/tools/session_gpu_check.sh 2>&1 | grep -v "^ *warnings.warn\|UserWarning" | tail -30
echo "session check done at ${SECONDS}s"
grep -h "memory used\|median" $O/*.log 2>/dev/null | cut -c1-200 | head
cp $O/*.json $O/logs.tgz $OUT/ 2>/dev/null
