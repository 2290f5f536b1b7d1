#!/usr/bin/env python3
"""Same-run torch baseline for penstock_bench_kernels --only dsa: the GLM-5.3 lightning-indexer logits (32 heads x 128,
e4m3 q / k with per-(row, head) and per-key scales) and the causal top-2048, one sequence, no prefix.

Per row block [r0, r1) (keys [0, r1), causal): S = torch._scaled_mm(q8 [R*32, 128], k8[:r1]^T) (FP8 tensor cores via
cuBLASLt, unit tensorwise scales, bf16 out), ReLU, times gate = w * q_scale * 128^-0.5, sum over heads in f32, times
k_scale, into a [T, T] f32 buffer; then (second timing) masked_fill(-inf) above the diagonal and topk(2048). Falls
back to a bf16 matmul of the dequantised values when _scaled_mm is unavailable. FLOPs as the Penstock bench: the
causal half 2 * 32 * 128 * T (T + 1) / 2. Prints one BASELINE_JSON line per T and op.

usage: dsa_indexer_torch_baseline.py [--tokens 4096 16384 65536] [--rows 512] [--reps 3]
"""
import argparse
import json
import time

import torch

HEADS, DIM, TOPK = 32, 128, 2048


def bench(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384, 65536])
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    dev = "cuda"
    torch.manual_seed(0)
    one = torch.ones((), device=dev)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    for T in args.tokens:
        q = torch.randn(T, HEADS, DIM, device=dev)
        k = torch.randn(T, DIM, device=dev)
        q_scale = q.abs().amax(-1).clamp_min(1e-4) / 448.0             # [T, H]
        k_scale = k.abs().amax(-1).clamp_min(1e-4) / 448.0             # [T]
        q8 = (q / q_scale[..., None]).to(torch.float8_e4m3fn).reshape(T * HEADS, DIM)
        k8 = (k / k_scale[:, None]).to(torch.float8_e4m3fn)
        del q, k
        w = torch.rand(T, HEADS, device=dev) * 0.4 - 0.2
        gate = (w * q_scale * DIM ** -0.5).reshape(T * HEADS, 1)
        logits = torch.empty(T, T, device=dev)
        key_pos = torch.arange(T, device=dev)
        try:
            torch._scaled_mm(q8[:16], k8[:16].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            mode = "scaled_mm_e4m3"
        except Exception as ex:  # noqa: BLE001 (report and fall back)
            print(f"# _scaled_mm unavailable ({type(ex).__name__}: {str(ex)[:120]}): bf16 matmul", flush=True)
            mode = "bf16_matmul"
        qb = q8.to(torch.bfloat16) if mode == "bf16_matmul" else None
        kb = k8.to(torch.bfloat16) if mode == "bf16_matmul" else None

        def block(r0, r1):
            R = r1 - r0
            if mode == "scaled_mm_e4m3":
                s = torch._scaled_mm(q8[r0 * HEADS:r1 * HEADS], k8[:r1].t(), scale_a=one, scale_b=one,
                                     out_dtype=torch.bfloat16)
            else:
                s = qb[r0 * HEADS:r1 * HEADS] @ kb[:r1].t()
            s = s.relu_().float().mul_(gate[r0 * HEADS:r1 * HEADS])      # [R*H, r1]
            lg = s.view(R, HEADS, r1).sum(1).mul_(k_scale[None, :r1])
            logits[r0:r1, :r1] = lg
            return lg

        def run_logits():
            for r0 in range(0, T, args.rows):
                block(r0, min(T, r0 + args.rows))

        def run_logits_topk():
            out = []
            for r0 in range(0, T, args.rows):
                r1 = min(T, r0 + args.rows)
                lg = block(r0, r1).masked_fill(key_pos[None, :r1] > key_pos[r0:r1, None], float("-inf"))
                out.append(lg.topk(min(TOPK, r1), -1).indices)
            return out

        flops = 2.0 * HEADS * DIM * T * (T + 1) / 2
        t0 = time.time()
        t_lg = bench(run_logits, 1, args.reps)
        t_tk = bench(run_logits_topk, 1, args.reps)
        for op, t in (("dsa.indexer_logits", t_lg), ("dsa.indexer_logits_topk", t_tk)):
            rec = {"bench": "torch_dsa_indexer", "mode": mode, "tokens": T, "heads": HEADS, "head_dim": DIM,
                   "rows_per_block": args.rows, "op": op, "ms": t, "tflops_causal": flops / t / 1e9,
                   "torch": torch.__version__}
            print("BASELINE_JSON " + json.dumps(rec), flush=True)
        print(f"# T={T}: logits {t_lg:.2f} ms ({flops / t_lg / 1e9:.0f} TFLOP/s causal), logits+top-k {t_tk:.2f} ms "
              f"({time.time() - t0:.0f} s wall)", flush=True)
        del q8, k8, logits, qb, kb, w, gate
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
