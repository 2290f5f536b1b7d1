#!/usr/bin/env python3
"""Same-run torch baselines for every op that bench/layer/layer_bench.cc (penstock_layer_bench) times, at the same
shapes, bf16, random data, CUDA events after warm-up, median of repeats, an L2 flush before each rep. One JSON line per
op with the same "op" names as the C++ bench, so tools/perf_layer_table.py can join them.

Library choices (the strongest torch path for each op on an H200, torch 2.11):
  gemm.*               torch.matmul / F.linear on bf16 (cuBLAS); the router as torch.mm(bf16, bf16, out_dtype=f32)
                       where torch offers it (else bf16 out + .float())
  grouped_gemm.*       torch._grouped_mm (bf16, [E, K, N] weights, int32 offsets from the same kind of routing)
  attention.mla_mha    F.scaled_dot_product_attention, cuDNN backend, causal, d_qk 192 / d_v 128 (PERF.md)
  rms_norm.*           F.rms_norm (torch's fused kernel) and the eager fp32 formula of torch_layer_baseline.py
  rope, silu_mul, add, routing, permute/unpermute: the eager torch code of torch_layer_baseline.py

  python3 tools/op_baselines.py --config ../shared/configs/deepseek-v3.json --tokens 4096,16384 [--json out.json]
"""
import argparse, json, math, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

dev = "cuda"; dt = torch.bfloat16


def make_bench(reps, warm):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)

    def bench(fn):
        fn(); torch.cuda.synchronize()
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        r, w = reps, warm
        if s.elapsed_time(e) > 500: r, w = min(reps, 3), 0
        for _ in range(w): fn()
        ts = []
        for i in range(r):
            flush.fill_(i & 0xFF)
            s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
        ts.sort()
        return ts[len(ts) // 2], ts[0], ts[-1], r
    return bench


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--model-name", default="")
    ap.add_argument("--tokens", default="4096,16384")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    c = json.load(open(a.config))
    name = a.model_name or a.config
    H, NH, QL, KL = c["hidden_size"], c["num_attention_heads"], c["q_lora_rank"], c["kv_lora_rank"]
    DN, DR, DV = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    E, TOPK, I = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    NSH = c.get("n_shared_experts", 0); NG = c.get("n_group", 1); TG = c.get("topk_group", 1)
    RSF = c.get("routed_scaling_factor", 1.0); QK = DN + DR
    bench = make_bench(a.reps, a.warmup)
    out = []
    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name()

    def W(o, i): return torch.randn(o, i, device=dev, dtype=dt) / math.sqrt(i)

    Wqa, Wqb, Wkva, Wkvb, Wo = W(QL, H), W(NH * QK, QL), W(KL + DR, H), W(NH * (DN + DV), KL), W(H, NH * DV)
    Wg = W(E, H); bias = torch.randn(E, device=dev) * 0.1
    Wgu = torch.randn(E, H, 2 * I, device=dev, dtype=dt) / math.sqrt(H)
    Wd = torch.randn(E, I, H, device=dev, dtype=dt) / math.sqrt(I)
    Wsg, Wsu, Wsd = W(I * NSH, H), W(I * NSH, H), W(H, I * NSH)
    w_h = torch.ones(H, device=dev, dtype=dt); w_q = torch.ones(QL, device=dev, dtype=dt)
    w_kv = torch.ones(KL, device=dev, dtype=dt)

    def rms(x, w, eps=1e-6):
        xf = x.float(); return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(dt) * w

    for T in [int(t) for t in a.tokens.split(",")]:
        def rec(op, st, flops=0.0, nbytes=0.0, **kw):
            med, mn, mx, r = st
            d = {"bench": "torch_op", "model": name, "gpu": gpu, "torch": torch.__version__, "tokens": T, "op": op,
                 "time_ms": med, "min_ms": mn, "max_ms": mx, "reps": r}
            if flops: d["tflops"] = flops / (med * 1e-3) / 1e12
            if nbytes: d["gbps"] = nbytes / (med * 1e-3) / 1e9
            d.update(kw); print(json.dumps(d), flush=True); out.append(d)

        x = torch.randn(T, H, device=dev, dtype=dt)
        g2 = lambda m, n, k: 2.0 * m * n * k
        rec("rms_norm.input", bench(lambda: F.rms_norm(x, (H,), w_h, 1e-6)), 0, T * H * 4, impl="F.rms_norm")
        rec("rms_norm.input.eager", bench(lambda: rms(x, w_h)), 0, T * H * 4, impl="eager fp32 formula")
        rec("gemm.q_a", bench(lambda: x @ Wqa.t()), g2(T, QL, H))
        cq = x @ Wqa.t()
        rec("rms_norm.q_a", bench(lambda: F.rms_norm(cq, (QL,), w_q, 1e-6)), 0, T * QL * 4, impl="F.rms_norm")
        rec("gemm.q_b", bench(lambda: cq @ Wqb.t()), g2(T, NH * QK, QL))
        rec("gemm.kv_a", bench(lambda: x @ Wkva.t()), g2(T, KL + DR, H))
        kv = x @ Wkva.t()
        rec("rms_norm.kv_a", bench(lambda: F.rms_norm(kv[:, :KL], (KL,), w_kv, 1e-6)), 0, T * KL * 4,
            impl="F.rms_norm")
        q = (cq @ Wqb.t()).view(T, NH, QK)
        pos = torch.arange(T, device=dev)
        inv = 1.0 / (10000 ** (torch.arange(0, DR, 2, device=dev).float() / DR))
        ang = pos[:, None].float() * inv[None]; cos, sin = ang.cos().to(dt), ang.sin().to(dt)

        def rope(t):
            a_, b_ = t[..., : DR // 2], t[..., DR // 2:]
            cc = cos.view(T, *([1] * (t.dim() - 2)), DR // 2); ss = sin.view(T, *([1] * (t.dim() - 2)), DR // 2)
            return torch.cat([a_ * cc - b_ * ss, a_ * ss + b_ * cc], -1)
        rec("rope.q_k", bench(lambda: (rope(q[..., DN:]), rope(kv[:, KL:].view(T, 1, DR)))), 0,
            T * (NH + 1) * DR * 4, impl="eager (torch_layer_baseline.py)")
        c_ = kv[:, :KL]
        rec("gemm.kv_b", bench(lambda: c_ @ Wkvb.t()), g2(T, NH * (DN + DV), KL))
        kvb = (c_ @ Wkvb.t()).view(T, NH, DN + DV)
        kp = kv[:, KL:].view(T, 1, DR)
        rec("copy.assemble_k", bench(lambda: torch.cat([kvb[..., :DN], kp.expand(T, NH, DR)], -1)), 0,
            T * NH * DN * 4 + T * NH * DR * 2, impl="torch.cat")
        Q = q.transpose(0, 1).unsqueeze(0)
        K = torch.cat([kvb[..., :DN], kp.expand(T, NH, DR)], -1).transpose(0, 1).unsqueeze(0)
        V = kvb[..., DN:].transpose(0, 1).unsqueeze(0)

        def sdpa():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(Q, K, V, is_causal=True)
        try:
            rec("attention.mla_mha", bench(sdpa), float(T) * T * NH * (QK + DV), 0, impl="cuDNN SDPA")
            ao = sdpa()[0].transpose(0, 1).reshape(T, NH * DV)
        except Exception as ex:  # a shape cuDNN refuses: say so, keep going
            print(json.dumps({"bench": "torch_op", "model": name, "tokens": T, "op": "attention.mla_mha",
                              "error": str(ex)[:300]}), flush=True)
            ao = torch.randn(T, NH * DV, device=dev, dtype=dt)
        rec("gemm.o_proj", bench(lambda: ao @ Wo.t()), g2(T, H, NH * DV))
        o = ao @ Wo.t()
        rec("add.residual", bench(lambda: x + o), 0, T * H * 6)
        rec("rms_norm.post", bench(lambda: F.rms_norm(x, (H,), w_h, 1e-6)), 0, T * H * 4, impl="F.rms_norm")
        try:
            torch.mm(x, Wg.t(), out_dtype=torch.float32)
            router = lambda: torch.mm(x, Wg.t(), out_dtype=torch.float32); rimpl = "torch.mm out_dtype=f32"
        except Exception:
            router = lambda: (x @ Wg.t()).float(); rimpl = "bf16 matmul + float()"
        rec("gemm.router_f32out", bench(router), g2(T, E, H), impl=rimpl)
        logits = router()

        def routing():
            s = logits.sigmoid(); sb = s + bias
            if NG > 1:
                g = sb.view(T, NG, E // NG).topk(2, -1).values.sum(-1)
                keep = torch.zeros_like(g).scatter_(1, g.topk(TG, -1).indices, 1.0)
                sb = sb.masked_fill(keep.repeat_interleave(E // NG, 1) == 0, float("-inf"))
            idx = sb.topk(TOPK, -1).indices; wts = s.gather(1, idx); wts = wts / wts.sum(-1, keepdim=True) * RSF
            return idx, wts
        rec("moe.routing", bench(routing), 0, T * E * 4 + T * TOPK * 8, impl="eager (torch_layer_baseline.py)")
        idx, wts = routing()

        def align():
            flat = idx.view(-1); order = flat.argsort(); tok = order // TOPK
            counts = torch.bincount(flat, minlength=E); offs = counts.cumsum(0).to(torch.int32)
            return order, tok, offs
        rec("moe.align", bench(align), 0, T * TOPK * 8, impl="argsort + bincount + cumsum")
        order, tok, offs = align()
        rec("moe.fill_permute", bench(lambda: x[tok]), 0, T * TOPK * H * 4, impl="index (gather)")
        xs = x[tok]
        rec("grouped_gemm.gate_up", bench(lambda: torch._grouped_mm(xs, Wgu, offs=offs)), g2(T * TOPK, 2 * I, H),
            impl="torch._grouped_mm")
        gu = torch._grouped_mm(xs, Wgu, offs=offs)
        rec("silu_mul.experts", bench(lambda: F.silu(gu[:, :I]) * gu[:, I:]), 0, T * TOPK * I * 6)
        act = F.silu(gu[:, :I]) * gu[:, I:]
        rec("grouped_gemm.down", bench(lambda: torch._grouped_mm(act, Wd, offs=offs)), g2(T * TOPK, H, I),
            impl="torch._grouped_mm")
        y = torch._grouped_mm(act, Wd, offs=offs)
        wsort = wts.view(-1)[order].unsqueeze(1).to(dt)

        def unpermute():
            return torch.zeros(T, H, device=dev, dtype=torch.float32).index_add_(0, tok, (y * wsort).float()).to(dt)
        rec("moe.unpermute", bench(unpermute), 0, T * TOPK * H * 2 + T * H * 4,
            impl="index_add_ fp32 (torch_layer_baseline.py)")
        if NSH > 0:
            Wsgu = torch.cat([Wsg, Wsu], 0)
            rec("gemm.shared_gate_up", bench(lambda: x @ Wsgu.t()), g2(T, 2 * I * NSH, H), impl="one fused GEMM")
            sg = x @ Wsgu.t()
            rec("silu_mul.shared", bench(lambda: F.silu(sg[:, :I * NSH]) * sg[:, I * NSH:]), 0, T * I * NSH * 6)
            sa = F.silu(sg[:, :I * NSH]) * sg[:, I * NSH:]
            rec("gemm.shared_down", bench(lambda: sa @ Wsd.t()), g2(T, H, I * NSH))
        del x, cq, kv, q, kvb, K, Q, V, ao, o, logits, xs, gu, act, y
        torch.cuda.empty_cache()
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
