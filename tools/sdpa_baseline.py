#!/usr/bin/env python3
"""Same-run torch baseline for Penstock's attention benchmark (bench/kernels/gemm_attention_bench.cc, "attention"):
F.scaled_dot_product_attention with the cuDNN backend (PERF.md), causal, bf16, one sequence, the DeepSeek-V3 MHA form
(128 heads, d_qk 192, d_v 128) at the layouts models/mla.cc uses (q [T, H, 192]; k [T, H, 192]; v a view of kv_b's
output [T, H, 256]), each viewed as [1, H, T, d] as tools/op_baselines.py does. CUDA events after warm-up, median of
reps. One JSON line per config; TFLOP/s counts the causal half of 2 * T^2 * H * (d_qk + d_v), as the C++ bench does.

  python3 tools/sdpa_baseline.py [--tokens 4096,16384] [--heads 128] [--reps 30] [--warmup 5] [--json out.json]
"""
import argparse, json
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="4096,16384")
    ap.add_argument("--heads", type=int, default=128)
    ap.add_argument("--d-qk", type=int, default=192)
    ap.add_argument("--d-v", type=int, default=128)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)
    H, DQK, DV = a.heads, a.d_qk, a.d_v
    nope = DQK - 64
    out = []
    for T in [int(t) for t in a.tokens.split(",")]:
        q = torch.randn(T, H, DQK, device=dev, dtype=dt)
        k = torch.randn(T, H, DQK, device=dev, dtype=dt)
        kvb = torch.randn(T, H, nope + DV, device=dev, dtype=dt)
        Q, K, V = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, kvb[..., nope:]))

        def sdpa():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(Q, K, V, is_causal=True, scale=0.08)
        for _ in range(a.warmup):
            sdpa()
        torch.cuda.synchronize()
        ts = []
        for _ in range(a.reps):
            s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
            s.record(); sdpa(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
        ts.sort()
        med = ts[len(ts) // 2]
        flops = float(T) * T * H * (DQK + DV)
        d = {"bench": "torch_sdpa", "impl": "cuDNN SDPA (F.scaled_dot_product_attention)", "gpu":
             torch.cuda.get_device_name(), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
             "heads": H, "seq": T, "d_qk": DQK, "d_v": DV, "time_ms": med, "min_ms": ts[0], "max_ms": ts[-1],
             "reps": a.reps, "tflops": flops / (med * 1e-3) / 1e12}
        print(json.dumps(d), flush=True)
        out.append(d)
        del q, k, kvb, Q, K, V
        torch.cuda.empty_cache()
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
