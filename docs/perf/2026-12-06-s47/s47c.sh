#!/usr/bin/env bash
# Session 47, call C (any GPU): bundle s47c = 41c8ab2 + the bf16 attention kernel's variant with q's A fragments in
# registers (PENSTOCK_ATTN_QREGS=1: the score products in wgmma's RS form read only k from shared memory; one P set).
# Conformance first (Bf16WgmmaKernelMatchesReference runs both variants), then the attention kernel bench and the
# DeepSeek-V3 bf16 layer at 16K, QREGS=1 / default interleaved in the same binary, then torch.compile's layer.
set -uo pipefail
NAME=s47c; O=/tmp/out.s47c; source tools/device_bundle_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date -u
save() { cd "$O" && tar czf "${OUT:-/tmp}/s47c.tgz" *.log *.json *.jsonl 2>/dev/null; cd - > /dev/null; }
conformance "$P/bin/cuda_attention_cudnn_test" '*Bf16Wgmma*' 200 || { save; grep -E "FAIL" "$O/conf.log" | head; exit 0; }
grep "\[conf\] attention_bf16" "$O/conf.log"
save
for r in 1 2; do for q in 1 0; do
  PENSTOCK_ATTN_QREGS=$q timeout 150 "$P/bin/penstock_bench_kernels" --only attention > "$O/attn.q$q.$r.jsonl" 2>&1
  echo "attention bench qregs=$q round $r rc $? at ${SECONDS}s"
done; done
python3 - "$O" <<'PY'
import json, sys
O = sys.argv[1]
def load(f): return [json.loads(l) for l in open(f) if l.startswith('{')]
runs = {(q, r): load(f"{O}/attn.q{q}.{r}.jsonl") for q in (1, 0) for r in (1, 2)}
key = lambda x: (x.get('shape'), x.get('impl'), x.get('seq'))
maps = {k: {key(x): x for x in v} for k, v in runs.items()}
print("columns: qregs 1 / 0 / 1 / 0 (TFLOP/s)")
for x in runs[(1, 1)]:
    if str(x.get('impl')).startswith('wgmma_bf16') or x.get('impl') == 'cudnn_sdpa':
        vals = [maps[k].get(key(x), {}).get('tflops', 0) for k in ((1, 1), (0, 1), (1, 2), (0, 2))]
        print(f"{x.get('shape')!s:20.20s} {x.get('seq')!s:6s} {x.get('impl')!s:30.30s} " + " / ".join(f"{v:6.1f}" for v in vals))
PY
save
for r in 1 2; do for q in 1 0; do
  PENSTOCK_ATTN_QREGS=$q LAYER_REPS=6 layer s47c dsv3bf.q$q.$r deepseek-v3.json 3:4 16384 --fp8-weights dequant
done; done
save
[ "${SECONDS}" -lt 330 ] || exit 0
torch_layer deepseek-v3 16384 120
PENSTOCK_ATTN_QREGS=1 LAYER_REPS=6 layer s47c dsv3bf.q1.3 deepseek-v3.json 3:4 16384 --fp8-weights dequant
PENSTOCK_ATTN_QREGS=0 LAYER_REPS=6 layer s47c dsv3bf.q0.3 deepseek-v3.json 3:4 16384 --fp8-weights dequant
save
