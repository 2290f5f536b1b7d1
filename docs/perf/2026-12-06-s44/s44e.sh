#!/usr/bin/env bash
# Session 44, call E (H100; the H200 starts for s44d.sh were refused): bundle s44p.tar.xz's s43k binaries (26e99a5's
# source). GLM-5.3 layer 6 at T 65536 (native FP8, FP8 indexer, fp8-accumulate) with the forward-alone measure beside
# torch.compile in the same call; then Nsight Compute's per-source-line stall samples of the KDA split form's prep
# kernel at 16K (the lineinfo paths point at /work/main: linked to this checkout when the machine allows).
set -uo pipefail
NAME=s44p; O=/tmp/out.s44e; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s44e.tgz" *.log *.json *.txt *.csv 2>/dev/null; cd - > /dev/null; }
G=(--fp8-weights native --dsa-fp8-indexer --dsa-fp8-accumulate)
LAYER_REPS=5 LAYER_TIMEOUT=100 layer s43k glm64.1 glm-5.3.json 6:7 65536 "${G[@]}"
python3 -c "
import json; r=json.load(open('$O/glm64.1.s43k.json'))[0]; print('   forward', r['median_ms'], 'with setup', r['median_ms_with_setup'])"
save
PYTHONUNBUFFERED=1 timeout 260 python3 tools/torch_layer_baseline.py --model glm-5.3 --configs "$P/configs" \
  --tokens 65536 > "$O/torch.glm-5.3.65536.log" 2>&1
echo "torch glm-5.3 65536 rc $? at ${SECONDS}s"; grep "^# .*T=" "$O/torch.glm-5.3.65536.log"
save
[ -e /work/main ] || { mkdir -p /work 2>/dev/null && ln -s "$PWD" /work/main 2>/dev/null; } || true
ls /work/main/src/kernels/cuda/kda_chunk_tc.cu > /dev/null 2>&1 && echo "source linked" || echo "source not linked"
export PENSTOCK_KDA_BENCH_SHAPES=16384:96
ncu=/usr/local/cuda/bin/ncu
timeout 150 $ncu --clock-control none -k regex:prep_kernel --launch-count 1 --section SourceCounters \
  --section WarpStateStats --import-source yes -o "$O/prepsrc" /tmp/s/s43k/bin/penstock_bench_kernels --only kda \
  --warmup 0 --reps 1 > "$O/prepsrc.ncu.log" 2>&1
echo "ncu rc $? at ${SECONDS}s"
$ncu -i "$O/prepsrc.ncu-rep" --page source --print-source cuda --csv > "$O/prepsrc.cuda.csv" 2> "$O/prepsrc.err.txt"
$ncu -i "$O/prepsrc.ncu-rep" --page source --print-source cuda,sass --csv > "$O/prepsrc.cudasass.csv" 2>> "$O/prepsrc.err.txt"
rm -f "$O/prepsrc.ncu-rep"
wc -l "$O"/prepsrc.*.csv; head -c 600 "$O/prepsrc.cuda.csv"
save
