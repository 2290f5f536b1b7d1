#!/usr/bin/env bash
# Session 29, call D: the warp-uniform warpgroup index (__shfl_sync from lane 0) in both attention kernels, persistent
# (s29d) and per-CTA (s29e = d434f62's kernels + that index), against s28h (d434f62's attention code). Attention tests
# on s29d; the attention kernel bench on all three, alternated; SASS opcode counts of the two 192 / 128 kernels.
set -uo pipefail
NAME=s29e; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 200 /tmp/s/s29d/bin/cuda_attention_cudnn_test > $O/attn_tests.s29d.log 2>&1
echo "s29d attention tests rc $? at ${SECONDS}s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' $O/attn_tests.s29d.log | tr '\n' ' '); $(grep -c '| PASS' $O/attn_tests.s29d.log) PASS, $(grep -c '| FAIL' $O/attn_tests.s29d.log) FAIL"
for b in s29e s29d s28h; do
  timeout 150 /tmp/s/$b/bin/penstock_bench_kernels --only attention > $O/attn.$b.jsonl 2>&1
  echo "== attention bench $b rc $? at ${SECONDS}s"
done
python3 - $O/attn.s29e.jsonl $O/attn.s29d.jsonl $O/attn.s28h.jsonl <<'PY'
import json, sys
def load(f):
    return [json.loads(l) for l in open(f) if l.startswith('{')]
print("shape seq impl: s29e (per-CTA + uniform) / s29d (persistent + uniform) / s28h ms")
for x, y, z in zip(*(load(f) for f in sys.argv[1:])):
    if x.get('bench') != 'attention' or x.get('tflops', 0) < 50 or 'cudnn' in x.get('impl', ''): continue
    print(f"{x.get('shape','')!s:16.16s} {x.get('seq')} {x.get('impl','')!s:34.34s} {x['time_us']/1000:.3f} / {y['time_us']/1000:.3f} / {z['time_us']/1000:.3f}")
PY
for b in s29e s29d; do
  cuobjdump -sass /tmp/s/$b/bin/penstock_bench_kernels > $O/all.$b.sass 2>&1
  for k in 'attention_fp8_kernelILi192ELi128E13__nv_bfloat16Lb1E' 'attention_bf16_kernelILi192ELi128E'; do
    awk -v pat="$k" '/Function : /{p = index($0, pat) > 0} p' $O/all.$b.sass > $O/$b.${k:10:4}.sass
  done
  rm -f $O/all.$b.sass
done
cd $O && tar czf ${OUT:-/tmp}/s29d.tgz *.log *.jsonl *.sass
