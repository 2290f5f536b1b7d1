#!/usr/bin/env python3
"""Same-call DeepGEMM baseline for Penstock's FP8 expert GEMMs (session 57).

Times DeepGEMM's SM90 m-grouped contiguous FP8 GEMM (`deep_gemm.m_grouped_fp8_gemm_nt_contiguous`, the 1D2D kernel:
1x128 activation scales, 128x128 weight scales, bf16 out; DeepSeek-V3's recipe, the one Penstock's kernels run) on
the DeepSeek-V3 expert shapes and on the expert row counts penstock_bench_kernels wrote
(PENSTOCK_FP8_OFFSETS_DIR -> DIR/dsv3_<T>.txt: 257 offsets, 256 experts, top-8). DeepGEMM needs each expert's rows
to start at a multiple of its alignment (128 on SM90): the padded rows are zero and computed, as the ragged tails of
Penstock's tiles are; TFLOP/s counts the real rows only (2 rows n k), as penstock_bench_kernels does.

Timing: DeepGEMM's own kernel-only measure (deep_gemm.testing.bench_kineto, an L2 flush before each of 30 calls) and
CUDA events around each call after a 256 MiB memset (median of 10, 2 warm-ups: penstock_bench_kernels' method); the
activation scales are made MN-major once, before timing (DeepGEMM's SM90 layout). Checked against a dequantised fp32 product on 32
sampled real rows. Then DeepGEMM's SM90 bf16 m-grouped GEMM (`m_grouped_bf16_gemm_nt_contiguous`) on the same rows and
bf16 weights, timed and checked the same way. One JSON line per case.
   PYTHONPATH=<DeepGEMM tree> python3 deepgemm_grouped.py DIR [T ...]"""
import json
import os
import statistics
import sys

import torch
import deep_gemm
from deep_gemm.testing import bench_kineto
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8

SHAPES = [("dsv3 gate_up 7168->4096", 4096, 7168), ("dsv3 down 2048->7168", 7168, 2048)]
EXPERTS = 256


def events_us(fn, flush):
    for _ in range(2):
        fn()
    ts = []
    for _ in range(10):
        flush.fill_(1)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts), min(ts)


def main():
    off_dir = sys.argv[1]
    tokens = [int(t) for t in sys.argv[2:]] or [16384, 4096]
    dev = torch.device("cuda")
    torch.manual_seed(0)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    align = deep_gemm.get_mk_alignment_for_contiguous_layout()
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "deep_gemm":
                      getattr(deep_gemm, "__version__", "?"), "mk_alignment": align, "num_sms":
                      deep_gemm.get_num_sms()}), flush=True)
    for name, n, k in SHAPES:
        w = torch.randn(EXPERTS, n, k, device=dev, dtype=torch.bfloat16)
        b8 = torch.empty(EXPERTS, n, k, device=dev, dtype=torch.float8_e4m3fn)
        bs = torch.empty(EXPERTS, (n + 127) // 128, (k + 127) // 128, device=dev, dtype=torch.float)
        for g in range(EXPERTS):
            b8[g], bs[g] = per_block_cast_to_fp8(w[g], use_ue8m0=False)
        for T in tokens:
            off = [int(x) for x in open(f"{off_dir}/dsv3_{T}.txt").read().split()]
            counts = [off[i + 1] - off[i] for i in range(EXPERTS)]
            rows = off[-1]
            starts, m = [], 0
            for c in counts:
                starts.append(m)
                m += (c + align - 1) // align * align
            layout = torch.full((m,), -1, dtype=torch.int32)
            for g, (s, c) in enumerate(zip(starts, counts)):
                layout[s:s + c] = g
            layout = layout.to(dev)
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            x[layout < 0] = 0
            a8, sa = per_token_cast_to_fp8(x, use_ue8m0=False)
            # the activation scales MN-major ([m, k / 128] with stride (1, m)), the layout DeepGEMM's SM90 kernel
            # reads, so that its per-call layout check has nothing to transpose
            sa_t = sa.t().contiguous().t()
            bs_t = bs
            d = torch.empty(m, n, device=dev, dtype=torch.bfloat16)

            def run():
                deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a8, sa_t), (b8, bs_t), d, layout,
                                                           disable_ue8m0_cast=True)

            run()
            torch.cuda.synchronize()
            # check: 32 real rows against the dequantised fp32 product
            gen = torch.Generator().manual_seed(T + n)
            real = torch.nonzero(layout >= 0).flatten().cpu()
            pick = real[torch.randint(0, real.numel(), (32,), generator=gen)].to(dev)
            g_of = layout[pick].long()
            ad = a8[pick].float() * sa[pick].repeat_interleave(128, dim=1)[:, :k]
            err = 0.0
            for j in range(32):
                g = int(g_of[j])
                wd = b8[g].float() * bs[g].repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k]
                ref = ad[j] @ wd.t()
                err = max(err, ((d[pick[j]].float() - ref).abs().max() / ref.abs().max()).item())
            k_s = bench_kineto(run, "fp8_gemm", suppress_kineto_output=True)
            ev_med, ev_min = events_us(run, flush)
            flops = 2.0 * rows * n * k
            print(json.dumps({"bench": "deepgemm_m_grouped_contiguous", "shape": name, "tokens": T, "rows": rows,
                              "padded_rows": m, "n": n, "k": k, "experts": EXPERTS,
                              "kernel_us_kineto": k_s * 1e6, "tflops_kineto": flops / k_s / 1e12,
                              "events_median_us": ev_med, "events_min_us": ev_min,
                              "tflops_events": flops / (ev_med * 1e-6) / 1e12,
                              "max_rel_err_32rows": err}), flush=True)
            # the bf16 m-grouped GEMM on the same rows (DeepGEMM's SM90 bf16 kernel), beside Penstock's bf16 path
            # (DG_SKIP_BF16=1: not run)
            def run_bf16():
                deep_gemm.m_grouped_bf16_gemm_nt_contiguous(x, w, d, layout)

            try:
                if os.environ.get("DG_SKIP_BF16") == "1":
                    raise RuntimeError("skipped (DG_SKIP_BF16=1)")
                run_bf16()
                torch.cuda.synchronize()
                errb = 0.0
                for j in range(32):
                    ref = x[pick[j]].float() @ w[int(g_of[j])].float().t()
                    errb = max(errb, ((d[pick[j]].float() - ref).abs().max() / ref.abs().max()).item())
                kb_s = bench_kineto(run_bf16, "bf16_gemm", suppress_kineto_output=True)
                evb_med, evb_min = events_us(run_bf16, flush)
                print(json.dumps({"bench": "deepgemm_m_grouped_contiguous_bf16", "shape": name, "tokens": T,
                                  "rows": rows, "padded_rows": m, "n": n, "k": k, "experts": EXPERTS,
                                  "kernel_us_kineto": kb_s * 1e6, "tflops_kineto": flops / kb_s / 1e12,
                                  "events_median_us": evb_med, "events_min_us": evb_min,
                                  "tflops_events": flops / (evb_med * 1e-6) / 1e12,
                                  "max_rel_err_32rows": errb}), flush=True)
            except Exception as ex:  # noqa: BLE001
                print(json.dumps({"bench": "deepgemm_m_grouped_contiguous_bf16", "shape": name, "tokens": T,
                                  "error": str(ex).splitlines()[0][:300]}), flush=True)
            del a8, sa, sa_t, d, layout, x
            torch.cuda.empty_cache()
        del b8, bs, w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
