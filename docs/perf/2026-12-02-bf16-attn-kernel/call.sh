#!/usr/bin/env bash
# One device call of session 14: unpacks build-dev-lead/$CALL.tar.xz, runs cuda_attention_cudnn_test (the bf16 and FP8
# attention kernels' conformance), penstock_bench_kernels --only attention (Penstock's bf16 wgmma kernel beside cuDNN's
# SDPA, and the FP8 kernels, in one run), then, when LAYERS is set and the tests passed, tools/layer_ab.sh over
# LAYERS x MODES at 16K (interleaved rounds), and GPU test binaries named in TESTS. Results in $OUT/$CALL.tar.xz.
#   CALL=s14x [LAYERS="dsv3 k3mla"] [MODES="default PENSTOCK_ATTENTION_KERNEL=cudnn"] [TESTS="cuda_kernels_test"] bash call.sh
set -uo pipefail
CALL="${CALL:?}"
mkdir -p /tmp/s && tar -xJf "build-dev-lead/${CALL}.tar.xz" -C /tmp/s
P=/tmp/s/${CALL}
O=/tmp/${CALL}; mkdir -p "$O"
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/gpu.txt"
timeout 240 "$P/bin/cuda_attention_cudnn_test" > "$O/attn_test.log" 2>&1; rc=$?; echo "attn test rc $rc"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|OK \]" "$O/attn_test.log" | head -20
echo "conf PASS $(grep -c '\[conf\].*PASS' "$O/attn_test.log") FAIL $(grep -c '\[conf\].*FAIL' "$O/attn_test.log")"
grep "\[conf\].*FAIL" "$O/attn_test.log" | head -20
timeout 240 "$P/bin/penstock_bench_kernels" --only attention > "$O/attn_bench.jsonl" 2> "$O/attn_bench.err"; echo "bench rc $?"
python3 - "$O/attn_bench.jsonl" <<'PY' | tee "$O/attn_bench.txt"
import json,sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r=json.loads(l)
    if r.get('impl') in ('cuda_core','cudnn_sdpa_autotuned'): continue
    print(r.get('shape'), r.get('seq'), r.get('impl'), f"{r.get('time_ms',0):.3f} ms", f"{r.get('tflops',0):.0f} TFLOP/s")
PY
for t in ${TESTS:-}; do
  timeout 200 "$P/bin/$t" > "$O/$t.log" 2>&1; echo "$t rc $?"; grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" "$O/$t.log" | head -10
done
if [ -n "${LAYERS:-}" ] && [ "$rc" = 0 ]; then
  PKG=$P OUT=$O/ab MODES="${MODES:-default}" LAYERS="$LAYERS" REPS=5 ROUNDS=2 RUN_TIMEOUT=90 timeout 330 bash "$P/tools/layer_ab.sh" > /dev/null 2>&1
  cat "$O/ab/ab.log"
fi
tar -C /tmp -cJf "$OUT/${CALL}.tar.xz" "${CALL}"
