#!/usr/bin/env bash
# Sourced by a device-call script (docs/perf/<date>/*.sh) on the GPU machine, with NAME set to the bundle's name:
# unpacks build-dev-lead/$NAME.tar.xz (tools/pack_kernel_bins.sh's layout: bin/, lib/, configs/, COMMIT) once into
# /tmp/s/$NAME, sets P (the bundle) and O (a results folder, created), and puts the bundle's libraries, torch's cuDNN
# and CUDA's on LD_LIBRARY_PATH. Prints the bundle's COMMIT line.
#   NAME=s27a; source tools/device_bundle_env.sh
: "${NAME:?set NAME to the bundle name}"
mkdir -p /tmp/s && [ -d "/tmp/s/${NAME}" ] || tar -xJf "build-dev-lead/${NAME}.tar.xz" -C /tmp/s
P=/tmp/s/${NAME}
O=${O:-/tmp/out.${NAME}}
mkdir -p "${O}"
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=${P}/lib:${CUDNN_LIB}:/usr/local/cuda/lib64
echo "commit $(cat "${P}/COMMIT")"

# One penstock_model_bench run of bundle B's binary (the layer loop of the sNNx.sh scripts, sessions 29-31):
#   layer B TAG CONFIG LAYERS TOKENS [extra flags...]     e.g. layer s31f dsv3f8.1 deepseek-v3.json 3:4 16384 --fp8-weights native
# writes $O/TAG.B.{json,log} (8 reps, --breakdown) and prints one line: the median and min, the attention-side scopes,
# the permute, the experts and their gate/up GEMM, and the joules per rep (layer_line).
layer() {
  local b=$1 tag=$2 cfg=$3 lay=$4 tok=$5; shift 5
  timeout "${LAYER_TIMEOUT:-100}" "/tmp/s/${b}/bin/penstock_model_bench" --config "${P}/configs/${cfg}" --layers "${lay}" \
    --tokens "${tok}" --reps "${LAYER_REPS:-8}" --breakdown "$@" --json "${O}/${tag}.${b}.json" > "${O}/${tag}.${b}.log" 2>&1
  echo "${tag} ${b} rc $? at ${SECONDS}s: $(layer_line "${O}/${tag}.${b}.json")"
}
# DeepSeek-V3 layer 3 at 16K with the expert down GEMM's TMA-store epilogue on or off (sessions 53-54; bundle s53b
# only: the forms were dropped in session 55): native FP8 + --fp8-attention under PENSTOCK_FP8_TMA_STORE, or bf16
# (dequant) under PENSTOCK_GG_TMA_STORE; LAYER_REPS reps.
#   tma_store_layer B fp8|bf16 ST ROUND      e.g. tma_store_layer s53b fp8 1 2   (writes $O/dsv3f8.st1.2.s53b.{json,log})
tma_store_layer() {
  if [ "$2" = fp8 ]; then
    PENSTOCK_FP8_TMA_STORE=$3 layer "$1" "dsv3f8.st$3.$4" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
  else
    PENSTOCK_GG_TMA_STORE=$3 layer "$1" "dsv3bf.st$3.$4" deepseek-v3.json 3:4 16384 --fp8-weights dequant
  fi
}
# The summary line of a penstock_model_bench --breakdown JSON record.
layer_line() {
  python3 - "$1" <<'PY' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))[0]
b = {x['scope']: x['median_ms'] for x in r.get('breakdown', [])}
scopes = [('attention', 'layer.attn.core.attention'), ('kv_expand', 'layer.attn.core.kv_expand'),
          ('fp8_quant', 'layer.attn.core.fp8_quant'), ('core', 'layer.attn.core'), ('permute', 'layer.moe.permute'),
          ('experts', 'layer.moe.experts'), ('gate_up_act', 'layer.moe.experts.gate_up_act'),
          ('indexer', 'layer.attn.indexer'), ('logits', 'layer.attn.indexer.logits')]
parts = [f"{name} {b[key]:.3f}" for name, key in scopes if key in b]
print(f"{r['median_ms']:.2f} ms (min {r['min_ms']:.2f}; " + ", ".join(parts) + f", {r.get('energy_j_per_rep', 0):.1f} J)")
PY
}

# Nsight Compute on the first launch of the kernels matching REGEX in one run of BIN (its arguments after it):
# every section the scripts read plus per-instruction stall samples, written as $O/TAG.{details.txt,sass.csv,
# hotspots.txt} (tools/ncu_sass_hotspots.py); prints the headline metrics and the per-region summary.
#   ncu_sass TAG REGEX BIN [ARGS...]     e.g. PENSTOCK_CUDA_PERF=1 ncu_sass tf32 tf32 $P/bin/cuda_kernels_test --gtest_filter=DsaOpTest.Perf
ncu_sass() {
  local tag=$1 regex=$2; shift 2
  local ncu=/usr/local/cuda/bin/ncu
  timeout "${NCU_TIMEOUT:-200}" "${ncu}" --clock-control none -k "regex:${regex}" --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats \
    --section SourceCounters -o "${O}/${tag}" "$@" > "${O}/${tag}.ncu.log" 2>&1
  echo "ncu ${tag} rc $? at ${SECONDS}s"
  "${ncu}" -i "${O}/${tag}.ncu-rep" --page details > "${O}/${tag}.details.txt" 2>&1
  "${ncu}" -i "${O}/${tag}.ncu-rep" --page source --print-source sass --csv > "${O}/${tag}.sass.csv" 2> "${O}/${tag}.sass.err"
  rm -f "${O}/${tag}.ncu-rep"
  python3 tools/ncu_sass_hotspots.py "${O}/${tag}.sass.csv" --top 25 > "${O}/${tag}.hotspots.txt" 2>&1
  grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  |Tensor|Registers" \
    "${O}/${tag}.details.txt" | head -12
  sed -n '/^regions/,$p' "${O}/${tag}.hotspots.txt" | head -14
}

# torch_layer_baseline.py for one model and token count, with fla on PYTHONPATH (install the carried wheels into
# /tmp/fla-site first); writes $O/torch.MODEL.TOKENS.log and prints its summary lines.
#   torch_layer MODEL TOKENS TIMEOUT     e.g. torch_layer kimi-k3-kda 16384 200
torch_layer() {
  PYTHONPATH=/tmp/fla-site PYTHONUNBUFFERED=1 timeout "$3" python3 tools/torch_layer_baseline.py --model "$1" \
    --configs "${P}/configs" --tokens "$2" > "${O}/torch.$1.$2.log" 2>&1
  echo "torch $1 $2 rc $? at ${SECONDS}s"; grep "^# .*T=" "${O}/torch.$1.$2.log"
}

# The DeepSeek-V3 goal rows of bundle B: layer 3 at 16K, bf16 (dequant) and native FP8 + --fp8-attention (LAYER_REPS
# 8), in rounds 1-2, then torch_layer_baseline.py's composition, then rounds 3-4, calling the script's save() (if it
# defines one) after each phase (session 57's s57b.sh loop).
#   dsv3_goal_rows B      e.g. dsv3_goal_rows pfG
dsv3_goal_rows() {
  local b=$1 r
  for r in 1 2 torch 3 4; do
    if [ "${r}" = torch ]; then
      torch_layer deepseek-v3 16384 200
    else
      LAYER_REPS=8 layer "${b}" "dsv3bf.${r}" deepseek-v3.json 3:4 16384 --fp8-weights dequant
      LAYER_REPS=8 layer "${b}" "dsv3f8.${r}" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
    fi
    if declare -F save > /dev/null; then save; fi
  done
}

# The FP8 kernel bench of bundle B's binary on the DeepSeek-V3 expert shapes at T 16384 (PENSTOCK_FP8_BENCH_SHAPE may
# narrow them) into $O/pen.B.TAG.jsonl, printing the grouped variants' time and TFLOP/s (the cp.async wgmma excluded).
#   fp8_grouped_bench B TAG      e.g. fp8_grouped_bench pfE 2
fp8_grouped_bench() {
  PENSTOCK_FP8_BENCH_SHAPE="${PENSTOCK_FP8_BENCH_SHAPE:-dsv3}" PENSTOCK_FP8_BENCH_T=16384 timeout 60 \
    "/tmp/s/$1/bin/penstock_bench_kernels" --only fp8 > "${O}/pen.$1.$2.jsonl" 2> "${O}/pen.$1.$2.err"
  echo "pen $1 $2 rc $? at ${SECONDS}s"
  python3 - "${O}/pen.$1.$2.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench', '').startswith('fp8_grouped') and r.get('variant') != 'wgmma':
            print(f"  {r['shape']:26s} {r.get('variant', ''):18s} {r.get('time_us', 0):9.1f} us {r.get('tflops', 0):7.1f}")
PY
}

# An FP8 expert-GEMM A/B of bundles on the DeepSeek-V3 shapes (sessions 59-60): the kernel bench of every bundle in
# BUNDLES, interleaved, for R1 rounds, then the FP8 layer 3 at 16K (native weights, FP8 attention) of every bundle in
# BUNDLES and, under PENSTOCK_FP8_N192=1, of every bundle in N192, for R2 rounds. QUICK=1 (the default): R1 2, R2 1;
# QUICK=0: 3 and 2.
#   fp8_dsv3_ab "pfA pfG pfB" "pfG pfA"
fp8_dsv3_ab() {
  local quick=${QUICK:-1} r b
  for r in $([ "${quick}" = 1 ] && echo 1 2 || echo 1 2 3); do
    for b in $1; do fp8_grouped_bench "${b}" "${r}"; done
  done
  for r in $([ "${quick}" = 1 ] && echo 1 || echo 1 2); do
    for b in $1; do layer "${b}" "dsv3f8.${r}" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention; done
    for b in $2; do
      PENSTOCK_FP8_N192=1 layer "${b}" "dsv3f8.n192.${r}" deepseek-v3.json 3:4 16384 --fp8-weights native --fp8-attention
    done
  done
}

# A conformance run first, as every A/B script does: BIN's gtest FILTER into $O/conf.log, one summary line, and a
# nonzero status unless gtest passed every test (scripts stop on it before timing anything).
#   conformance BIN FILTER [TIMEOUT]     e.g. conformance "$P/bin/cuda_kernels_test" 'KdaOpTest.DeltaRule*' || exit 0
conformance() {
  timeout "${3:-120}" "$1" --gtest_filter="$2" > "${O}/conf.log" 2>&1
  local rc=$?
  echo "conformance $2 rc ${rc}: $(grep -c 'PASS$' "${O}/conf.log") PASS lines, $(grep -c 'FAIL' "${O}/conf.log") FAIL;" \
    "$(grep -E '^\[  (PASSED|FAILED)' "${O}/conf.log" | tr '\n' ' ')"
  [ "${rc}" = 0 ] && grep -q "^\[  PASSED  \]" "${O}/conf.log" && ! grep -q "^\[  FAILED  \]" "${O}/conf.log"
}

# The KDA split form's lines of a penstock_bench_kernels --only kda JSON-lines file: TAG, tokens, ms, max |d| against
# the 16-row recurrent check.      kda_split_lines FILE TAG
kda_split_lines() {
  python3 - "$1" "$2" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith('{') and '"kda_delta_rule"' in line:
        r = json.loads(line)
        if r['variant'] == 'chunk_tensor_core_split':
            print(sys.argv[2], r['tokens'], round(r['ms'], 3), r.get('max_abs_diff_vs_recurrent_16rows'))
PY
}

# The FP8 grouped GEMM variants' lines of a penstock_bench_kernels --only fp8 JSON-lines file (median µs, TFLOP/s),
# without the cp.async and bf16 rows:      fp8_lines FILE TAG
fp8_lines() {
  python3 - "$1" "$2" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r = json.loads(l)
    if r.get('bench') != 'fp8_grouped_gemm' or r['variant'] in ('wgmma', 'bf16_grouped_gemm'): continue
    print(f"  {sys.argv[2]} {r['shape'][:12]:12s} {r['variant']:18s} {r['time_us']:9.1f} us {r.get('tflops', 0):7.1f} TFLOP/s")
PY
}

# The bf16 grouped GEMM rows of a penstock_bench_kernels --only grouped JSON-lines file:      gg_lines FILE TAG
gg_lines() {
  python3 - "$1" "$2" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r.get('bench') == 'grouped_gemm':
            print(f"  {sys.argv[2]} {r['model']} {r['proj']} {r['variant']:20s} {r['time_us']:9.1f} us {r['tflops']:7.1f} TFLOP/s")
PY
}

# One line per row of a penstock_bench_kernels --only wgmma_probe JSON-lines file:      probe_lines FILE
probe_lines() {
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print("probe cta_wgs", r.get("cta_warpgroups"), "maxnreg", r.get("maxnreg"), "wgs", r["warpgroups"], "n", r["n"],
              "chains", r["chains_per_kstep"], r["mode"], r["form"], r.get("operands", "ones"), round(r["tflops"]))
PY
}

# SM clock and power through a call: smi_start samples them every 50 ms into $O/smi.csv (SMI holds the sampler's pid)
# and mark NAME timestamps a phase in $O/marks.log ("idle" between phases); phase_clocks prints each phase's median
# SM clock and power over its busy samples (power > 200 W), after kill "$SMI".
smi_start() {
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 50 \
    > "${O}/smi.csv" 2>/dev/null &
  SMI=$!
}
mark() { echo "$(date +%Y/%m/%d\ %H:%M:%S.%3N) $*" >> "${O}/marks.log"; }
phase_clocks() {
  python3 - "${O}" <<'PY'
import sys, datetime as dt
o = sys.argv[1]
fmt = '%Y/%m/%d %H:%M:%S.%f'
marks = [(dt.datetime.strptime(l[:23], fmt), l[24:].strip()) for l in open(f'{o}/marks.log')]
smi = []
for l in open(f'{o}/smi.csv'):
    f = [x.strip() for x in l.split(',')]
    try: smi.append((dt.datetime.strptime(f[0], fmt), float(f[1]), float(f[2])))
    except Exception: pass
for i, (t0, name) in enumerate(marks):
    if name == 'idle': continue
    t1 = marks[i + 1][0] if i + 1 < len(marks) else dt.datetime.max
    s = [x for x in smi if t0 <= x[0] < t1]
    busy = [x for x in s if x[2] > 200]
    if s:
        u = busy or s
        print(f"{name:<18} {len(s):4d} samples, busy {len(busy):4d}: SM clock median "
              f"{sorted(x[1] for x in u)[len(u)//2]:.0f} MHz, power median {sorted(x[2] for x in u)[len(u)//2]:.0f} W")
PY
}
# The forward's time against the host's enqueue time, per token count, of a penstock_model_bench --json FILE:
#   enqueue_lines FILE TAG
enqueue_lines() {
  python3 - "$1" "$2" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[2], 'no json', e); sys.exit(0)
for r in rows:
    print(f"{sys.argv[2]:<14} T {r['tokens']:5d}: forward {r['median_ms']:.3f} ms, host enqueue "
          f"{r.get('median_host_enqueue_ms', -1):.3f} ms, with setup {r['median_ms_with_setup']:.3f}")
PY
}
