#!/usr/bin/env bash
# Session 52, call A (any GPU). Bundle s52a: the wgmma probe with random-operand rows and the model bench's host
# enqueue time (this session's work tree), the FP8 GEMMs as landed. nvidia-smi samples the SM clock and the power
# every 50 ms through the whole call; marks.log timestamps each phase, and the summary prints each phase's clock and
# power. 1. the probe; 2. the DeepSeek-V3 expert GEMMs at T = 16384 (--only fp8), 2 rounds; 3. DeepSeek-V3 layers 3:5
# (two layers) at T 256 / 1024 / 4096, bf16 and native FP8 weights: the forward's time against the host's enqueue.
# Each phase saves the results tar as it ends.
set -uo pipefail
NAME=s52a; O=/tmp/out.s52a; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 50 \
  > "$O/smi.csv" 2>/dev/null &
SMI=$!
mark() { echo "$(date +%Y/%m/%d\ %H:%M:%S.%3N) $*" >> "$O/marks.log"; }
save() { cd "$O" && tar czf "${OUT:-/tmp}/s52a.tgz" *.log *.jsonl *.json *.csv 2>/dev/null; cd - > /dev/null; }
mark probe
"$P/bin/penstock_bench_kernels" --only wgmma_probe > "$O/probe.jsonl" 2> "$O/probe.log"
echo "probe rc $? at ${SECONDS}s"
mark idle; sleep 1; save
fp8() {
  mark "fp8.$1"
  PENSTOCK_FP8_BENCH_SHAPE=dsv3 PENSTOCK_FP8_BENCH_T=16384 timeout 120 "$P/bin/penstock_bench_kernels" --only fp8 \
    > "$O/fp8.$1.jsonl" 2> "$O/fp8.$1.err.log"
  echo "fp8 bench round $1 rc $? at ${SECONDS}s"; fp8_lines "$O/fp8.$1.jsonl" "r$1"
  mark idle; sleep 1; save
}
layers() {
  mark "layers.$1"
  local flags=(); [ "$1" = native ] && flags=(--fp8-weights native)
  timeout 200 "$P/bin/penstock_model_bench" --config "$P/configs/deepseek-v3.json" --layers 3:5 --tokens 256,1024,4096 \
    --reps 8 "${flags[@]}" --json "$O/layers.$1.json" > "$O/layers.$1.log" 2>&1
  echo "layers $1 rc $? at ${SECONDS}s"
  mark idle; sleep 1; save
}
# in order of need: a call cut short by its time limit still brings back what it saved
fp8 1; layers bf16; fp8 2; layers native
kill "$SMI" 2>/dev/null; sleep 0.3
save
probe_lines "$O/probe.jsonl"
python3 - "$O" <<'PY'
import json, sys, datetime as dt
o = sys.argv[1]
fmt = '%Y/%m/%d %H:%M:%S.%f'
marks = [(dt.datetime.strptime(l[:23], fmt), l[24:].strip()) for l in open(f'{o}/marks.log')]
smi = []
for l in open(f'{o}/smi.csv'):
    f = [x.strip() for x in l.split(',')]
    try: smi.append((dt.datetime.strptime(f[0], fmt), float(f[1]), float(f[2])))
    except Exception: pass
for i, (t0, name) in enumerate(marks):
    t1 = marks[i + 1][0] if i + 1 < len(marks) else dt.datetime.max
    s = [x for x in smi if t0 <= x[0] < t1]
    busy = [x for x in s if x[2] > 200]
    if s:
        print(f"{name:<14} {len(s):4d} samples, busy {len(busy):4d}: SM clock median "
              f"{sorted(x[1] for x in (busy or s))[len(busy or s)//2]:.0f} MHz, power median "
              f"{sorted(x[2] for x in (busy or s))[len(busy or s)//2]:.0f} W")
for w in ('bf16', 'native'):
    try:
        rows = json.load(open(f'{o}/layers.{w}.json'))
    except Exception as e:
        print(w, 'no json', e); continue
    for r in rows:
        print(f"layers 3:5 {w:<6} T {r['tokens']:5d}: forward {r['median_ms']:.3f} ms, host enqueue "
              f"{r.get('median_host_enqueue_ms', -1):.3f} ms, with setup {r['median_ms_with_setup']:.3f}")
PY
