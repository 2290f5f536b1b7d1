#!/usr/bin/env python3
"""Same-run torch baseline for penstock_bench_kernels --only grouped: torch._grouped_mm (bf16, cuBLAS/CUTLASS grouped)
on exactly the offsets the bench wrote (PENSTOCK_GROUPED_OFFSETS_DIR=dir -> dir/<model>_<T>.txt), at the same
shapes: out[rows of g] = a[rows of g] @ b[g]^T with b [E, n, k] row-major (passed as b.transpose(-2, -1)).
CUDA events, 2 warm-ups, median of 8, an L2 flush (256 MiB memset) before each rep. One JSON line per case."""
import json
import os
import statistics
import sys

import torch

MODELS = [("deepseek_v3", 256, 7168, 2048), ("kimi_k3", 896, 3584, 3072)]  # name, experts, hidden, inter


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PENSTOCK_GROUPED_OFFSETS_DIR", ".")
    dev = torch.device("cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    for name, experts, hidden, inter in MODELS:
        for proj, n, k in (("gate_up", 2 * inter, hidden), ("down", hidden, inter)):
            b = torch.randn(experts, n, k, device=dev, dtype=torch.bfloat16, generator=gen)
            for T in (4096, 16384):
                path = os.path.join(d, f"{name}_{T}.txt")
                if not os.path.exists(path):
                    continue
                off = [int(x) for x in open(path).read().split()]
                rows = off[-1]
                a = torch.randn(rows, k, device=dev, dtype=torch.bfloat16, generator=gen)
                offs = torch.tensor(off[1:], device=dev, dtype=torch.int32)
                bt = b.transpose(-2, -1)
                rec = {"bench": "grouped_gemm", "variant": "torch._grouped_mm", "model": name, "proj": proj,
                       "tokens": T, "experts": experts, "rows": rows, "n": n, "k": k, "torch": torch.__version__}
                try:
                    fn = lambda: torch._grouped_mm(a, bt, offs=offs)
                    out = fn()
                    # spot check against a per-group matmul on 3 groups
                    err = 0.0
                    for g in (0, experts // 2, experts - 1):
                        r0, r1 = off[g], off[g + 1]
                        if r1 > r0:
                            ref = (a[r0:r1].float() @ b[g].float().t())
                            err = max(err, (out[r0:r1].float() - ref).abs().max().item())
                    rec["max_abs_err_3groups"] = err
                    for _ in range(2):
                        fn()
                    times = []
                    for _ in range(8):
                        flush.fill_(1)
                        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        s.record()
                        fn()
                        e.record()
                        e.synchronize()
                        times.append(s.elapsed_time(e) * 1e3)
                    med = statistics.median(times)
                    rec["time_us"] = med
                    rec["tflops"] = 2.0 * rows * n * k / (med * 1e-6) / 1e12
                except Exception as ex:  # noqa: BLE001
                    rec["error"] = str(ex)[:300]
                print(json.dumps(rec), flush=True)
                del a
            del b
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
