#!/usr/bin/env python3
"""Same-run torch baseline for penstock_bench_kernels --only fp8 (bench/kernels/fp8_gemm_bench.cc), same shapes:

dense, T in (4096, 16384), DeepSeek-V3 projections (n, k): q_a (1536, 7168), kv_a (576, 7168), q_b (24576, 1536),
kv_b (32768, 512), o (7168, 16384), shared gate_up (4096, 7168), shared down (7168, 2048):
  - torch._scaled_mm with DeepSeek block scales: a e4m3 [T, k] with 1x128 scales (T, k/128) outer-dim-major, b = w.t()
    with w e4m3 [n, k] and 128x128 scales (n/128, k/128) rows padded to a multiple of 4 (what torch validates for
    cuBLAS's VEC128 x BLK128x128 recipe); checked against a dequantised fp32 product on 4 rows;
  - torch._scaled_mm rowwise (scale_a (T, 1), scale_b (1, n), use_fast_accum=True): PERF.md's FP8 goal baseline;
  - bf16 a @ w.t().
grouped, DeepSeek-V3 experts (256, gate_up 7168->4096 and down 2048->7168) on the offsets the bench wrote
(PENSTOCK_FP8_OFFSETS_DIR -> dir/dsv3_<T>.txt): torch._grouped_mm bf16, and torch._scaled_grouped_mm rowwise fp8.
CUDA events, 2 warm-ups, median of 10, an L2 flush (256 MiB memset) before each rep. One JSON line per case; a case
torch refuses prints its error."""
import json
import os
import statistics
import sys

import torch

DENSE = [("q_a 7168->1536", 1536, 7168), ("kv_a 7168->576", 576, 7168), ("q_b 1536->24576", 24576, 1536),
         ("kv_b 512->32768", 32768, 512), ("o 16384->7168", 7168, 16384),
         ("shared gate_up 7168->4096", 4096, 7168), ("shared down 2048->7168", 7168, 2048)]
GROUPED = [("dsv3 gate_up 7168->4096", 4096, 7168), ("dsv3 down 2048->7168", 7168, 2048)]
PEAK = 1979.0
F8 = torch.float8_e4m3fn


def bench(fn, flush):
    for _ in range(2):
        fn()
    times = []
    for _ in range(10):
        flush.fill_(1)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def emit(rec, flops, us):
    rec["time_us"] = us
    rec["tflops"] = flops / (us * 1e-6) / 1e12
    rec["pct_fp8_peak"] = 100.0 * rec["tflops"] / PEAK
    print(json.dumps(rec), flush=True)


def run_case(rec, fn, flops, flush, check=None):
    try:
        out = fn()
        if check is not None:
            rec["max_rel_err_4rows"] = check(out)
        emit(rec, flops, bench(fn, flush))
    except Exception as ex:  # noqa: BLE001
        rec["error"] = str(ex).splitlines()[0][:300]
        print(json.dumps(rec), flush=True)


def dense(dev, flush, gen):
    for name, n, k in DENSE:
        kb, nb = (k + 127) // 128, (n + 127) // 128
        w_bf = torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen)
        w8 = (w_bf * 100).clamp(-440, 440).to(F8)
        ws_store = torch.rand(nb, (kb + 3) // 4 * 4, device=dev, generator=gen) * 1e-4 + 1e-4
        ws = ws_store[:, :kb]
        for T in (4096, 16384):
            base = {"bench": "fp8_gemm", "shape": name, "tokens": T, "n": n, "k": k, "torch": torch.__version__}
            a_bf = torch.randn(T, k, device=dev, dtype=torch.bfloat16, generator=gen)
            a8 = (a_bf * 100).clamp(-440, 440).to(F8)
            sa = (torch.rand(kb, T, device=dev, generator=gen) * 1e-2 + 1e-2).t()  # (T, kb), stride (1, T)
            flops = 2.0 * T * n * k

            def check(out, a8=a8, sa=sa, w8=w8, ws=ws, k=k):
                ad = a8[:4].float() * sa[:4].repeat_interleave(128, dim=1)[:, :k]
                wd = w8.float() * ws.repeat_interleave(128, dim=0)[: w8.shape[0]].repeat_interleave(128, dim=1)[:, :k]
                ref = ad @ wd.t()
                return ((out[:4].float() - ref).abs().max() / ref.abs().max()).item()

            run_case(dict(base, variant="torch_scaled_mm_blockwise_1x128_128x128"),
                     lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=ws.t(), out_dtype=torch.bfloat16),
                     flops, flush, check)
            sar = torch.rand(T, 1, device=dev, generator=gen) + 0.5
            sbr = torch.rand(1, n, device=dev, generator=gen) + 0.5
            run_case(dict(base, variant="torch_scaled_mm_rowwise_fast_accum"),
                     lambda: torch._scaled_mm(a8, w8.t(), scale_a=sar, scale_b=sbr, out_dtype=torch.bfloat16,
                                              use_fast_accum=True), flops, flush)
            run_case(dict(base, variant="torch_bf16_matmul"), lambda: a_bf @ w_bf.t(), flops, flush)
            del a_bf, a8, sa
        del w_bf, w8
        torch.cuda.empty_cache()


def grouped(dev, flush, gen, off_dir):
    experts = 256
    for name, n, k in GROUPED:
        b_bf = torch.randn(experts, n, k, device=dev, dtype=torch.bfloat16, generator=gen)
        b8 = (b_bf * 100).clamp(-440, 440).to(F8)
        sb = torch.rand(experts, n, device=dev, generator=gen) + 0.5
        for T in (4096, 16384):
            path = os.path.join(off_dir, f"dsv3_{T}.txt")
            if not os.path.exists(path):
                continue
            off = [int(x) for x in open(path).read().split()]
            rows = off[-1]
            offs = torch.tensor(off[1:], device=dev, dtype=torch.int32)
            a_bf = torch.randn(rows, k, device=dev, dtype=torch.bfloat16, generator=gen)
            a8 = (a_bf * 100).clamp(-440, 440).to(F8)
            sa = torch.rand(rows, device=dev, generator=gen) + 0.5
            base = {"bench": "fp8_grouped_gemm", "shape": name, "tokens": T, "rows": rows, "n": n, "k": k,
                    "experts": experts, "torch": torch.__version__}
            flops = 2.0 * rows * n * k
            run_case(dict(base, variant="torch_grouped_mm_bf16"),
                     lambda: torch._grouped_mm(a_bf, b_bf.transpose(-2, -1), offs=offs), flops, flush)
            run_case(dict(base, variant="torch_scaled_grouped_mm_rowwise"),
                     lambda: torch._scaled_grouped_mm(a8, b8.transpose(-2, -1), sa, sb, offs=offs,
                                                      out_dtype=torch.bfloat16, use_fast_accum=True), flops, flush)
            del a_bf, a8
        del b_bf, b8
        torch.cuda.empty_cache()


def main():
    off_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PENSTOCK_FP8_OFFSETS_DIR", ".")
    dev = torch.device("cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
                      "cublaslt": torch._C._cuda_getCompiledVersion() if hasattr(torch._C, "_cuda_getCompiledVersion")
                      else None, "gpu": torch.cuda.get_device_name()}), flush=True)
    dense(dev, flush, gen)
    grouped(dev, flush, gen, off_dir)


if __name__ == "__main__":
    main()
