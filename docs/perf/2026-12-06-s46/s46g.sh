#!/usr/bin/env bash
# Session 46, call G (any GPU; the last of the session's device time): bundle s46c (= b07c22d's code, with the state
# kernel's three swizzled stages) - the KDA kernel at 4K / 16K / 64K (96 heads x 128, f32 I/O) beside fla chunk_kda
# bf16 in the same call, the kernel bench before and after fla.
set -uo pipefail
NAME=s46c; O=/tmp/out.s46g; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s46g.tgz" *.log *.jsonl 2>/dev/null; cd - > /dev/null; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla-site .whl/*.whl \
  > "$O/pip.log" 2>&1 || echo "fla wheels: install failed"
export PENSTOCK_KDA_BENCH_SHAPES=4096:96,16384:96,65536:96
timeout 40 "$P/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.1.jsonl" 2>&1
echo "kda bench rc $? at ${SECONDS}s"; kda_split_lines "$O/kda.1.jsonl" s46c
PENSTOCK_FLA_CASES=bf16 PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout 130 python3 tools/fla_kda_baseline.py 4096 16384 65536 > "$O/fla.jsonl" 2> "$O/fla.err.log"
echo "fla rc $? at ${SECONDS}s"; python3 -c "
import json
for l in open('$O/fla.jsonl'): r=json.loads(l); print('fla bf16', r['tokens'], round(r['ms'],3))"
save
timeout 40 "$P/bin/penstock_bench_kernels" --only kda --warmup 1 --reps 5 > "$O/kda.2.jsonl" 2>&1
echo "kda bench rc $? at ${SECONDS}s"; kda_split_lines "$O/kda.2.jsonl" s46c
save
