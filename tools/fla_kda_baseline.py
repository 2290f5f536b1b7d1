#!/usr/bin/env python3
"""Same-run fla baseline for penstock_bench_kernels --only kda: fla's chunk_kda (fla.ops.kda.chunk_kda, fla-core 0.6.0,
Triton path; FlashKDA's CUTLASS backend is not installed) at Kimi K3 dims: B = 1, H = 96, K = V = 128, T = 4096,
16384, 65536, fla's natural layout [B, T, H, D], chunk 64, scale K^-0.5, zero initial_state (f32) with
output_final_state=True (Penstock's op reads and writes the state too). Inputs seeded random like the Penstock bench
(not the same numbers): q, k uniform then L2-normalised (outside the timed call: use_qk_l2norm_in_kernel=False),
v uniform unit variance, g precomputed log decay uniform in [-0.5, 0) per channel (use_gate_in_kernel=False), beta
uniform in (0.015, 0.985) (post-sigmoid). Cases: bf16 (q, k, v, beta bf16; g f32, as fla's KDA layer keeps the gate),
bf16 with safe_gate=True (fla's M=16 tensor-core path for gates bounded in [-5, 0), K3's lower_bound form), and f32
(every input f32). torch.inference_mode(); 2 warm-ups (Triton autotuning happens there), then CUDA events around the
call alone, an L2 flush (256 MiB memset) before each rep, median of 5 (3 at T = 65536). One JSON line per case, with
the same FLOP model as the Penstock bench: T*H*(2C(3K+2V) + 6KV), C = 64.
  python3 tools/fla_kda_baseline.py [T ...]          PENSTOCK_FLA_CASES=bf16,f32 picks and orders the cases"""
import json
import os
import statistics
import sys
import time

import torch

H_K3, D, C = 96, 128, 64  # Kimi K3 heads (the default), head dim, chunk
FLOP_PER_TOKEN_HEAD = 2 * C * (3 * D + 2 * D) + 6 * D * D


def uniform(shape, gen, lo, hi, dtype=torch.float32):
    return torch.rand(shape, device="cuda", generator=gen, dtype=torch.float32).mul_(hi - lo).add_(lo).to(dtype)


def main():
    t_import = time.time()
    import fla
    from fla.ops.kda import chunk_kda
    print(f"# fla {fla.__version__} imported in {time.time() - t_import:.1f} s", file=sys.stderr, flush=True)

    # arguments: T or T:H (heads default 96), as penstock_bench_kernels' PENSTOCK_KDA_BENCH_SHAPES
    shapes = [(int(x.split(":")[0]), int(x.split(":")[1]) if ":" in x else H_K3) for x in sys.argv[1:]] or \
        [(4096, H_K3), (16384, H_K3), (65536, H_K3)]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    cases = [("bf16", torch.bfloat16, False), ("f32", torch.float32, False), ("bf16_safe_gate", torch.bfloat16, True)]
    # PENSTOCK_FLA_CASES=bf16,bf16_safe_gate: these cases only, in this order (each case's first shape pays ~60 s of
    # Triton autotuning, so a time-limited call names the ones it needs first)
    wanted = [c for c in os.environ.get("PENSTOCK_FLA_CASES", "").split(",") if c]
    if wanted:
        unknown = [c for c in wanted if c not in {name for name, _, _ in cases}]
        if unknown:
            sys.exit(f"PENSTOCK_FLA_CASES: unknown case(s) {unknown}; cases: bf16, f32, bf16_safe_gate")
        cases = [next(c for c in cases if c[0] == w) for w in wanted]
    for name, dt, safe in cases:
        for T, H in shapes:
            rec = {"bench": "kda_delta_rule", "variant": "fla.chunk_kda", "case": name, "tokens": T, "heads": H,
                   "head_dim": D, "chunk": C, "fla": getattr(fla, "__version__", "?"), "torch": torch.__version__,
                   "triton": __import__("triton").__version__, "gpu": torch.cuda.get_device_name()}
            try:
                with torch.inference_mode():
                    s3 = 3 ** 0.5
                    q = torch.nn.functional.normalize(uniform((1, T, H, D), gen, -s3, s3), dim=-1, eps=1e-6).to(dt)
                    k = torch.nn.functional.normalize(uniform((1, T, H, D), gen, -s3, s3), dim=-1, eps=1e-6).to(dt)
                    v = uniform((1, T, H, D), gen, -s3, s3, dt)
                    g = uniform((1, T, H, D), gen, -0.5, 0.0)  # f32 log decay
                    beta = uniform((1, T, H), gen, 0.015, 0.985, dt)
                    h0 = torch.zeros(1, H, D, D, device="cuda", dtype=torch.float32)

                    def fn():
                        return chunk_kda(q, k, v, g, beta, scale=D ** -0.5, initial_state=h0,
                                         output_final_state=True, safe_gate=safe)

                    print(f"# {name} T={T}: warm-up (Triton compile / autotune on first use)", file=sys.stderr,
                          flush=True)
                    t0 = time.time()
                    for _ in range(2):
                        o, _st = fn()
                    torch.cuda.synchronize()
                    rec["warmup_s"] = round(time.time() - t0, 2)
                    rec["out_finite"] = bool(torch.isfinite(o).all().item())
                    rec["out_absmax"] = o.float().abs().max().item()
                    times = []
                    for _ in range(3 if T >= 65536 else 5):
                        flush.fill_(1)
                        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        s.record()
                        fn()
                        e.record()
                        e.synchronize()
                        times.append(s.elapsed_time(e))
                    med = statistics.median(times)
                    rec["ms"] = med
                    rec["min_ms"] = min(times)
                    rec["tokens_per_s"] = T / (med * 1e-3)
                    rec["tflops_chunk_model"] = FLOP_PER_TOKEN_HEAD * T * H / (med * 1e-3) / 1e12
                    del q, k, v, g, beta, h0, o, _st
            except Exception as exc:  # report and go on with the next case
                rec["error"] = f"{type(exc).__name__}: {exc}"[:400]
            print(json.dumps(rec), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
