#!/usr/bin/env python3
"""Same-run torch compositions of one layer at real dimensions, bf16, seeded random weights and inputs, prefix 0: the
baselines of PERF.md's layer goals, beside penstock_model_bench (tools/model_bench_run.sh).

  --model deepseek-v3       DeepSeek-V3 MLA + MoE: ../shared/tools/torch_layer_baseline.py's timed code, unchanged
                            (MHA-form MLA through cuDNN SDPA, MoE 256 x top-8 through torch._grouped_mm).
  --model glm-5.3           GLM-5.3 DSA + MoE (layer 6, a "full" indexer layer): MLA projections; the indexer (q/k/
                            weights projections, ReLU(q.k) logits weighted over 32 heads, causal top-2048 per row);
                            sparse absorbed MLA over each row's selected latents, GATHERED in row blocks (the faster of
                            the two honest formulations that fit: a dense [rows, 64, keys] score tensor masked from the
                            top-k by scatter does 4x the QK/PV work at 16K and writes 34 GB of f32 scores); MoE 256 x
                            top-8 (sigmoid + bias, renormalised, x2.5) + 1 shared expert, SiLU.
  --model kimi-k3-kda       Kimi K3 KDA + latent MoE (layer 1): projections, causal short conv + SiLU and the gated
                            RMSNorm in torch; fla's chunk_kda (Triton) with its fused L2 norm, lower-bound gate
                            (safe_gate, -5) and beta sigmoid in the kernel; latent MoE 896 x top-16 in 3584-d with SiTU
                            + 2 shared experts; the two AttnRes reads of the layer (1 bank row + the partial sum).
  --model kimi-k3-mla       Kimi K3 gated NoPE MLA (96 heads, MHA form through cuDNN SDPA) + the same MoE and AttnRes.
  --model glm-5.3-indexer   the indexer alone at 16K and 64K (the older PERF.md anchor; not run by model_bench_run.sh).

Each model: the layer in eager mode at every --tokens T, and under torch.compile at the largest T (unless
--no-compile); median of 5 CUDA-event timings after warm-ups. FLOPs are model_bench_table.layer_flops (the same
convention as Penstock's rows, read from the same config file), so the MFU columns compare like with like. One
"BASELINE_JSON {...}" line per result for tools/model_bench_table.py.

--tiny: shrinks every dimension (and T) and runs on the CPU in float32 with no compile and with a torch reference of
chunk_kda in place of fla: checks the script's logic on a machine without a GPU; its timings mean nothing.
  python3 tools/torch_layer_baseline.py --model glm-5.3 --configs ../shared/configs [--tokens 4096,16384]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_bench_table import layer_flops  # noqa: E402  (the FLOP convention shared with Penstock's rows)

PEAK = 989.0
ARGS = None
dev = "cuda"
dt = torch.bfloat16


def bench(fn, iters=5, warm=2):
    for _ in range(warm):
        fn()
    sync()
    ts = []
    for _ in range(iters):
        if dev == "cuda":
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


def W(o, i):
    return torch.randn(o, i, device=dev, dtype=dt).div_(math.sqrt(i))


def ones(n):
    return torch.ones(n, device=dev, dtype=dt)


def rms(x, w, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(dt) * w


def rope_tables(T, dr, theta):
    pos = torch.arange(T, device=dev).float()
    inv = 1.0 / (theta ** (torch.arange(0, dr, 2, device=dev).float() / dr))
    ang = pos[:, None] * inv[None]
    return ang.cos().to(dt), ang.sin().to(dt)


def rope(t, cos, sin):  # t [T, ..., dr], half-split (the layout does not change the cost)
    h = t.shape[-1] // 2
    a, b = t[..., :h], t[..., h:]
    shape = (t.shape[0],) + (1,) * (t.dim() - 2) + (h,)
    c, s = cos.view(shape), sin.view(shape)
    return torch.cat([a * c - b * s, a * s + b * c], -1)


def emit(layer_name, family, T, op, ms, flops, extra=None):
    rec = {"bench": "torch_layer", "model": family, "layer": layer_name, "tokens": T, "op": op, "time_ms": ms,
           "tflops": flops / ms / 1e9, "mfu": flops / ms / 1e9 / PEAK, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "tiny": bool(ARGS.tiny)}
    rec.update(extra or {})
    print("BASELINE_JSON " + json.dumps(rec), flush=True)


# ---------------------------------------------------------------------------------------------------------------
# MoE: sigmoid + bias routing (n_group 1), renormalised top-k x scale; routed experts through torch._grouped_mm in
# the expert width (latent MoE: down-projected, RMS-normalised and up-projected around them); shared experts.
def silu_glu(gu, inter):
    return F.silu(gu[:, :inter]) * gu[:, inter:]


def situ_glu(gu, inter, beta=4.0, beta_l=25.0):  # K3 SiTU in f32 (MODELS.md §3.5)
    g, u = gu[:, :inter].float(), gu[:, inter:].float()
    return (beta * torch.tanh(g / beta) * torch.sigmoid(g) * (beta_l * torch.tanh(u / beta_l))).to(dt)


def grouped_mm(a, b, offs):
    if dev == "cuda":
        return torch._grouped_mm(a, b, offs=offs)
    out, start = [], 0  # --tiny on the CPU: the same product per group
    for e, end in enumerate(offs.tolist()):
        out.append(a[start:end] @ b[e])
        start = end
    return torch.cat(out)


class Moe:
    def __init__(self, H, E, topk, inter, n_shared, scale, act, latent=0):
        self.E, self.topk, self.inter, self.scale, self.act = E, topk, inter, scale, act
        eh = latent or H
        self.Wg = W(E, H)
        self.bias = torch.randn(E, device=dev) * 0.1
        # grouped_mm wants [E, K, N]; in-place scaling (K3's experts are 59 GB in bf16: no second copy)
        self.Wgu = torch.randn(E, eh, 2 * inter, device=dev, dtype=dt).div_(math.sqrt(eh))
        self.Wd = torch.randn(E, inter, eh, device=dev, dtype=dt).div_(math.sqrt(inter))
        self.latent = latent
        if latent:
            self.Wdown, self.Wup, self.wln = W(latent, H), W(H, latent), ones(latent)
        si = inter * n_shared
        self.si = si
        self.Wsgu, self.Wsd = (W(2 * si, H), W(H, si)) if n_shared else (None, None)

    def glu(self, gu, inter):
        return silu_glu(gu, inter) if self.act == "silu" else situ_glu(gu, inter)

    def __call__(self, h):
        T = h.shape[0]
        logits = h.float() @ self.Wg.float().t()
        s = logits.sigmoid()
        idx = (s + self.bias).topk(self.topk, -1).indices
        wts = s.gather(1, idx)
        wts = wts / wts.sum(-1, keepdim=True) * self.scale
        flat = idx.view(-1)
        order = flat.argsort()
        tok = order // self.topk
        counts = torch.bincount(flat, minlength=self.E)
        offs = counts.cumsum(0).to(torch.int32)
        z = h @ self.Wdown.t() if self.latent else h
        xs = z[tok]
        gu = grouped_mm(xs, self.Wgu, offs)
        y = grouped_mm(self.glu(gu, self.inter), self.Wd, offs)
        y = y * wts.view(-1)[order].unsqueeze(1).to(dt)
        zo = torch.zeros(T, z.shape[1], device=dev, dtype=torch.float32).index_add_(0, tok, y.float())
        out = (rms(zo, self.wln) @ self.Wup.t()) if self.latent else zo.to(dt)
        if self.Wsgu is not None:
            out = out + self.glu(h @ self.Wsgu.t(), self.si) @ self.Wsd.t()
        return out


# ---------------------------------------------------------------------------------------------------------------
# Kimi K3 Attention Residuals: one read = softmax over [bank rows ; partial] of w . RMSNorm_gamma(row), f32.
class AttnRes:
    def __init__(self, H):
        self.w = torch.randn(H, device=dev) / math.sqrt(H)
        self.gamma = torch.ones(H, device=dev)

    def __call__(self, bank, p):  # bank [T, n, H] f32, p [T, H] -> [T, H] dt
        V = torch.cat([bank, p.float().unsqueeze(1)], 1)
        k = V * torch.rsqrt(V.pow(2).mean(-1, keepdim=True) + 1e-5) * self.gamma
        a = torch.softmax(k @ self.w, -1)
        return (a.unsqueeze(-1) * V).sum(1).to(dt)


# ---------------------------------------------------------------------------------------------------------------
def deepseek_v3(cfg, T):
    """The timed code of ../shared/tools/torch_layer_baseline.py (PERF.md's baseline), dims from the config."""
    H, NH, QL, KL = cfg["hidden_size"], cfg["num_attention_heads"], cfg["q_lora_rank"], cfg["kv_lora_rank"]
    DN, DR, DV = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    E, TOPK, I, NG, TG = (cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"],
                          cfg["n_group"], cfg["topk_group"])
    x = torch.randn(T, H, device=dev, dtype=dt)
    w_in, w_post = ones(H), ones(H)
    Wqa, Wqb, wqn = W(QL, H), W(NH * (DN + DR), QL), ones(QL)
    Wkva, Wkvb, wkvn = W(KL + DR, H), W(NH * (DN + DV), KL), ones(KL)
    Wo = W(H, NH * DV)
    Wg = W(E, H)
    bias = torch.randn(E, device=dev) * 0.1
    Wgu = torch.randn(E, H, 2 * I, device=dev, dtype=dt) / math.sqrt(H)
    Wd = torch.randn(E, I, H, device=dev, dtype=dt) / math.sqrt(I)
    Wsgu, Wsd = W(2 * I, H), W(H, I)
    cos, sin = rope_tables(T, DR, 10000.0)

    def attn_part(h):
        cq = rms(h @ Wqa.t(), wqn)
        q = (cq @ Wqb.t()).view(T, NH, DN + DR)
        kv = h @ Wkva.t()
        c, kpe = rms(kv[:, :KL], wkvn), kv[:, KL:]
        kvb = (c @ Wkvb.t()).view(T, NH, DN + DV)
        qn, qp = q[..., :DN], rope(q[..., DN:], cos, sin)
        kn, v = kvb[..., :DN], kvb[..., DN:]
        kp = rope(kpe, cos, sin).view(T, 1, DR).expand(T, NH, DR)
        o = sdpa(torch.cat([qn, qp], -1), torch.cat([kn, kp], -1), v)
        return o.reshape(T, NH * DV) @ Wo.t()

    def moe_part(h):
        logits = h.float() @ Wg.float().t()
        s = logits.sigmoid()
        sb = s + bias
        g = sb.view(T, NG, E // NG).topk(2, -1).values.sum(-1)
        keep = torch.zeros_like(g).scatter_(1, g.topk(TG, -1).indices, 1.0)
        sb = sb.masked_fill(keep.repeat_interleave(E // NG, 1) == 0, float("-inf"))
        idx = sb.topk(TOPK, -1).indices
        wts = s.gather(1, idx)
        wts = wts / wts.sum(-1, keepdim=True) * 2.5
        flat = idx.view(-1)
        order = flat.argsort()
        tok = order // TOPK
        offs = torch.bincount(flat, minlength=E).cumsum(0).to(torch.int32)
        xs = h[tok]
        gu = grouped_mm(xs, Wgu, offs)
        y = grouped_mm(silu_glu(gu, I), Wd, offs)
        y = y * wts.view(-1)[order].unsqueeze(1).to(dt)
        out = torch.zeros(T, H, device=dev, dtype=torch.float32).index_add_(0, tok, y.float()).to(dt)
        sg = h @ Wsgu.t()
        return out + silu_glu(sg, I) @ Wsd.t()

    def layer():
        h = x + attn_part(rms(x, w_in))
        return h + moe_part(rms(h, w_post))

    parts = {"part.attention": lambda: attn_part(x), "part.moe": lambda: moe_part(x)}
    return layer, parts, {}


def sdpa(q, k, v):
    """Causal attention, q/k [T, heads, dqk], v [T, heads, dv] -> [T, heads, dv]: cuDNN SDPA on the GPU."""
    Q, K, V = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    if dev == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
    else:
        o = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
    return o[0].transpose(0, 1)


# ---------------------------------------------------------------------------------------------------------------
def glm_dsa(cfg, T):
    H, NH, QL, KL = cfg["hidden_size"], cfg["num_attention_heads"], cfg["q_lora_rank"], cfg["kv_lora_rank"]
    DN, DR, DV = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    HI, DI, TOPK = cfg["index_n_heads"], cfg["index_head_dim"], cfg["index_topk"]
    LAT = KL + DR
    scale = (DN + DR) ** -0.5
    rows = ARGS.rows
    x = torch.randn(T, H, device=dev, dtype=dt)
    w_in, w_post = ones(H), ones(H)
    Wqa, Wqb, wqn = W(QL, H), W(NH * (DN + DR), QL), ones(QL)
    Wkva, wkvn = W(LAT, H), ones(KL)
    Wkvb = W(NH * (DN + DV), KL)
    Wuk = Wkvb.view(NH, DN + DV, KL)[:, :DN, :].contiguous()             # [NH, DN, KL]
    Wuv_t = Wkvb.view(NH, DN + DV, KL)[:, DN:, :].transpose(1, 2).contiguous()  # [NH, KL, DV]
    Wo = W(H, NH * DV)
    Wqi, Wki, Wwp = W(HI * DI, QL), W(DI, H), W(HI, H).float()
    ln_w, ln_b = torch.ones(DI, device=dev, dtype=dt), torch.zeros(DI, device=dev, dtype=dt)
    cos, sin = rope_tables(T, DR, cfg["rope_parameters"]["rope_theta"] if "rope_parameters" in cfg else 1e6)
    moe = Moe(H, cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"],
              cfg["n_shared_experts"], cfg["routed_scaling_factor"], "silu")
    key_pos = torch.arange(T, device=dev)

    def indexer_inputs(h, cq):
        q = (cq @ Wqi.t()).view(T, HI, DI)
        q = torch.cat([rope(q[..., :DR], cos, sin), q[..., DR:]], -1)
        k = F.layer_norm(h @ Wki.t(), (DI,), ln_w, ln_b, 1e-6)
        k = torch.cat([rope(k[:, :DR], cos, sin), k[:, DR:]], -1)
        w = (h.float() @ Wwp.t()) * (HI ** -0.5 * DI ** -0.5)
        return q, k, w.to(dt)

    def select(q, k, w, r0, r1):
        """Top-k key positions of rows [r0, r1) over keys [0, r1) (causal): -> idx [R, k] i64, valid [R, k]."""
        R = r1 - r0
        s = (q[r0:r1].reshape(R * HI, DI) @ k[:r1].t()).view(R, HI, r1).relu_()
        lg = torch.bmm(w[r0:r1].unsqueeze(1), s).squeeze(1).float()              # [R, r1]
        lg = lg.masked_fill(key_pos[None, :r1] > key_pos[r0:r1, None], float("-inf"))
        top = lg.topk(min(TOPK, r1), -1)
        return top.indices, top.values > float("-inf")

    def sparse_mla(q_abs, latent, idx, valid, r0, r1):
        """Absorbed MLA of rows [r0, r1) over their own selected latents (gathered): -> [R, NH, KL]."""
        kv = latent[idx]                                                            # [R, k, LAT]
        sc = torch.bmm(q_abs[r0:r1], kv.transpose(1, 2)).float() * scale            # [R, NH, k]
        sc = sc.masked_fill(~valid[:, None, :], float("-inf"))
        p = torch.softmax(sc, -1).to(dt)
        return torch.bmm(p, kv[..., :KL])

    def attn_part(h):
        cq = rms(h @ Wqa.t(), wqn)
        q = (cq @ Wqb.t()).view(T, NH, DN + DR)
        kv = h @ Wkva.t()
        latent = torch.cat([rms(kv[:, :KL], wkvn), rope(kv[:, KL:], cos, sin)], -1)  # [T, LAT]: the cached row
        q_lat = torch.bmm(q[..., :DN].transpose(0, 1), Wuk).transpose(0, 1)          # [T, NH, KL]
        q_abs = torch.cat([q_lat, rope(q[..., DN:], cos, sin)], -1)                  # [T, NH, LAT]
        qi, ki, wi = indexer_inputs(h, cq)
        o_lat = torch.empty(T, NH, KL, device=dev, dtype=dt)
        for r0 in range(0, T, rows):
            r1 = min(T, r0 + rows)
            idx, valid = select(qi, ki, wi, r0, r1)
            o_lat[r0:r1] = sparse_mla(q_abs, latent, idx, valid, r0, r1)
        o = torch.bmm(o_lat.transpose(0, 1), Wuv_t).transpose(0, 1)                 # [T, NH, DV]
        return o.reshape(T, NH * DV) @ Wo.t()

    def indexer_only(h):
        cq = rms(h @ Wqa.t(), wqn)
        qi, ki, wi = indexer_inputs(h, cq)
        return [select(qi, ki, wi, r0, min(T, r0 + rows))[0] for r0 in range(0, T, rows)]

    def layer():
        h = x + attn_part(rms(x, w_in))
        return h + moe(rms(h, w_post))

    if ARGS.tiny:  # the gathered sparse MLA equals dense absorbed MLA under a mask scattered from the same top-k
        q_abs = torch.randn(T, NH, LAT, device=dev, dtype=dt)
        latent = torch.randn(T, LAT, device=dev, dtype=dt)
        qi, ki, wi = indexer_inputs(x, rms(x @ Wqa.t(), wqn))
        r0, r1 = T - rows, T
        idx, valid = select(qi, ki, wi, r0, r1)
        got = sparse_mla(q_abs, latent, idx, valid, r0, r1)
        keep = torch.zeros(r1 - r0, r1, dtype=torch.bool).scatter_(1, idx, valid)
        assert bool((keep.sum(1) == torch.clamp(torch.arange(r0, r1) + 1, max=TOPK)).all()), "top-k not causal"
        sc = torch.einsum("rhc,sc->rhs", q_abs[r0:r1], latent[:r1]) * scale
        ref = torch.softmax(sc.masked_fill(~keep[:, None, :], float("-inf")), -1) @ latent[:r1, :KL]
        err = (got - ref).abs().max().item()
        assert err < 1e-4, f"sparse MLA gather vs scattered mask: max abs err {err}"
        print(f"# --tiny: GLM sparse MLA (gather) matches the scattered-mask form (max abs err {err:.1e})")

    parts = {"part.attention": lambda: attn_part(x), "part.indexer": lambda: indexer_only(x),
             "part.moe": lambda: moe(x)}
    return layer, parts, {"sparse_mla": f"gather, row blocks of {rows}"}


# ---------------------------------------------------------------------------------------------------------------
def k3_common(cfg, T):
    H = cfg["hidden_size"]
    moe = Moe(H, cfg["num_experts"], cfg["num_experts_per_token"], cfg["moe_intermediate_size"],
              cfg["num_shared_experts"], cfg["routed_scaling_factor"], "situ", latent=cfg["routed_expert_hidden_size"])
    p = torch.randn(T, H, device=dev, dtype=dt)          # the partial block sum entering the layer
    bank = torch.randn(T, 1, H, device=dev)              # one completed row (b0) before layers 1..11, f32
    return H, moe, p, bank, AttnRes(H), AttnRes(H), ones(H), ones(H)


def k3_layer(attn, moe, p, bank, res_attn, res_mlp, w_in, w_post):
    def layer():
        q = p + attn(rms(res_attn(bank, p), w_in))
        return q + moe(rms(res_mlp(bank, q), w_post))
    return layer


def kda_reference(q, k, v, g, beta, scale):
    """--tiny only: the KDA recurrence per token (MODELS.md §3.3), f32; q, k L2-normalised here."""
    q, k = F.normalize(q.float(), dim=-1, eps=1e-6) * scale, F.normalize(k.float(), dim=-1, eps=1e-6)
    T, Hh, D = q.shape
    S = torch.zeros(Hh, D, D)
    out = torch.empty(T, Hh, D)
    for t in range(T):
        S = S * g[t].float().exp().unsqueeze(-1)
        kt, vt, bt = k[t], v[t].float(), beta[t].float()
        S = S + bt[:, None, None] * kt.unsqueeze(-1) * (vt - torch.einsum("hkv,hk->hv", S, kt)).unsqueeze(1)
        out[t] = torch.einsum("hkv,hk->hv", S, q[t])
    return out.to(dt)


def kimi_k3_kda(cfg, T):
    H, moe, p, bank, ra, rm, w_in, w_post = k3_common(cfg, T)
    lin = cfg["linear_attn_config"]
    NHk, D, KC = lin["num_heads"], lin["head_dim"], lin["short_conv_kernel_size"]
    C = NHk * D
    lb = lin.get("gate_lower_bound", -5.0)
    Wqkv, Wfa, Wfb, Wb, Wgo, Wo = W(3 * C, H), W(D, H), W(C, D), W(NHk, H), W(C, H), W(H, C)
    conv_w = torch.randn(3 * C, KC, device=dev, dtype=dt) / math.sqrt(KC)
    A_log = torch.log(torch.empty(NHk, device=dev).uniform_(1, 16))
    dt_bias = torch.randn(C, device=dev) * 0.1
    o_norm = ones(D)
    h0 = torch.zeros(1, NHk, D, D, device=dev, dtype=torch.float32)
    info = {}
    if dev == "cuda":
        import fla
        from fla.ops.kda import chunk_kda
        info["fla"] = getattr(fla, "__version__", "?")

    def short_conv_silu(m):  # causal depthwise conv over time, kernel KC, then SiLU (fuses under torch.compile)
        mp = F.pad(m, (0, 0, KC - 1, 0))
        acc = mp[KC - 1:] * conv_w[:, KC - 1]
        for j in range(KC - 1):
            acc = acc + mp[j:j + T] * conv_w[:, j]
        return F.silu(acc)

    def gate(f):  # K3's lower-bound gate in torch (fallback path and --tiny)
        return (lb * torch.sigmoid(A_log.exp().repeat_interleave(D) * (f.float().view(T, C) + dt_bias))).view(T, NHk, D)

    fused = [dev == "cuda"]  # gate / beta inside fla's kernel; falls back to torch gates if this fla rejects it

    def kda_core(q, k, v, f, b):
        if dev != "cuda":
            return kda_reference(q, k, v, gate(f), torch.sigmoid(b.float()), D ** -0.5)
        if fused[0]:
            try:
                o, _ = chunk_kda(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), f.unsqueeze(0), b.unsqueeze(0),
                                 scale=D ** -0.5, initial_state=h0, output_final_state=True,
                                 use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                 use_beta_sigmoid_in_kernel=True, safe_gate=True, lower_bound=lb, A_log=A_log,
                                 dt_bias=dt_bias)
                return o[0]
            except Exception as ex:
                print(f"# chunk_kda with in-kernel gates failed ({type(ex).__name__}: {str(ex)[:200]}); "
                      "gates in torch instead", flush=True)
                fused[0] = False
                info["kda"] = "fla chunk_kda, l2norm in kernel, safe_gate; gate and beta sigmoid in torch"
        o, _ = chunk_kda(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), gate(f).unsqueeze(0),
                         torch.sigmoid(b.float()).to(dt).unsqueeze(0), scale=D ** -0.5, initial_state=h0,
                         output_final_state=True, use_qk_l2norm_in_kernel=True, safe_gate=True)
        return o[0]

    if dev == "cuda":  # torch.compile compiles the torch ops around fla's Triton call, not into it
        kda_core = torch.compiler.disable(kda_core)

    def attn(h):
        mixed = short_conv_silu(h @ Wqkv.t())                                       # [T, 3C]
        q, k, v = (mixed[:, i * C:(i + 1) * C].reshape(T, NHk, D) for i in range(3))
        f = ((h @ Wfa.t()) @ Wfb.t()).view(T, NHk, D)                                 # raw gate (fla applies it)
        b = h @ Wb.t()                                                               # raw beta (fla: sigmoid)
        o = kda_core(q.contiguous(), k.contiguous(), v.contiguous(), f, b)          # [T, NHk, D]
        gate = (h @ Wgo.t()).view(T, NHk, D)
        of = o.float()
        of = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + 1e-5) * o_norm.float() * torch.sigmoid(gate.float())
        return of.to(dt).view(T, C) @ Wo.t()

    layer = k3_layer(attn, moe, p, bank, ra, rm, w_in, w_post)
    parts = {"part.attention": lambda: attn(p), "part.moe": lambda: moe(p)}
    info["kda"] = ("fla chunk_kda, l2norm + lower-bound gate + beta sigmoid in kernel, safe_gate" if dev == "cuda"
                   else "torch reference recurrence (--tiny)")
    return layer, parts, info


def kimi_k3_mla(cfg, T):
    H, moe, p, bank, ra, rm, w_in, w_post = k3_common(cfg, T)
    NH, QL, KL = cfg["num_attention_heads"], cfg["q_lora_rank"], cfg["kv_lora_rank"]
    DN, DR, DV = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    Wqa, Wqb, wqn = W(QL, H), W(NH * (DN + DR), QL), ones(QL)
    Wkva, Wkvb, wkvn = W(KL + DR, H), W(NH * (DN + DV), KL), ones(KL)
    Wgo, Wo = W(NH * DV, H), W(H, NH * DV)

    def attn(h):  # NoPE: the "rope" slices are used unrotated; output gate sigmoid(h @ Wg^T)
        q = (rms(h @ Wqa.t(), wqn) @ Wqb.t()).view(T, NH, DN + DR)
        kv = h @ Wkva.t()
        kvb = (rms(kv[:, :KL], wkvn) @ Wkvb.t()).view(T, NH, DN + DV)
        k = torch.cat([kvb[..., :DN], kv[:, KL:].view(T, 1, DR).expand(T, NH, DR)], -1)
        o = sdpa(q, k, kvb[..., DN:]).reshape(T, NH * DV)
        o = (o.float() * torch.sigmoid((h @ Wgo.t()).float())).to(dt)
        return o @ Wo.t()

    layer = k3_layer(attn, moe, p, bank, ra, rm, w_in, w_post)
    return layer, {"part.attention": lambda: attn(p), "part.moe": lambda: moe(p)}, {}


# ---------------------------------------------------------------------------------------------------------------
MODELS = {  # name -> (config file, the model_bench row it pairs with, its layer index, builder)
    "deepseek-v3": ("deepseek-v3", "deepseek-v3.mla-moe", 3, deepseek_v3),
    "glm-5.3": ("glm-5.3", "glm-5.3.dsa-moe", 6, glm_dsa),
    "kimi-k3-kda": ("kimi-k3", "kimi-k3.kda-moe", 1, kimi_k3_kda),
    "kimi-k3-mla": ("kimi-k3", "kimi-k3.mla-moe", 3, kimi_k3_mla),
}


def tiny_config(cfg):
    """Every width divided down (head counts kept small), for --tiny."""
    c = dict(cfg)
    for key, val in {"hidden_size": 64, "q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                     "qk_rope_head_dim": 8, "v_head_dim": 16, "num_attention_heads": 4, "moe_intermediate_size": 24,
                     "index_n_heads": 4, "index_head_dim": 16, "index_topk": 8, "routed_expert_hidden_size": 32}.items():
        if key in c:
            c[key] = val
    for key in ("n_routed_experts", "num_experts"):
        if key in c:
            c[key] = 16
    for key in ("num_experts_per_tok", "num_experts_per_token"):
        if key in c:
            c[key] = 4
    if "n_group" in c:
        c["n_group"], c["topk_group"] = 4, 2
    if "linear_attn_config" in c:
        c["linear_attn_config"] = dict(c["linear_attn_config"], num_heads=3, head_dim=16)
    return c


def run_model(name, configs_dir, tokens):
    cfg_name, layer_name, layer_index, build = MODELS[name]
    cfg = json.load(open(os.path.join(configs_dir, cfg_name + ".json")))
    if ARGS.tiny:
        cfg = tiny_config(cfg)
    family = cfg_name
    compile_T = max(tokens) if ARGS.compile else None
    for T in sorted(tokens):
        torch.manual_seed(0)
        t_build = time.time()
        layer, parts, info = build(cfg, T)
        sync()
        flops = layer_flops(cfg, [layer_index, layer_index + 1], T, 0, "mha")
        info = dict(info, build_s=round(time.time() - t_build, 1))
        with torch.inference_mode():
            out = layer()
            info["out_finite"] = bool(torch.isfinite(out.float()).all().item())
            del out
            t_eager = bench(layer)
            emit(layer_name, family, T, "layer", t_eager, flops, info)
            print(f"# {layer_name} T={T}: torch eager {t_eager:.1f} ms = {flops / t_eager / 1e9:.0f} TFLOP/s "
                  f"(MFU {100 * flops / t_eager / 1e9 / PEAK:.1f}%)", flush=True)
            if ARGS.parts:
                for op, fn in parts.items():
                    tp = bench(fn)
                    print(f"#   {op}: {tp:.1f} ms", flush=True)
                    emit(layer_name, family, T, op, tp, 0.0)
            if T == compile_T:
                try:
                    t0 = time.time()
                    cl = torch.compile(layer)
                    cl()
                    sync()
                    compile_s = time.time() - t0
                    t_comp = bench(cl)
                    emit(layer_name, family, T, "layer.compiled", t_comp, flops, dict(info, compile_s=round(compile_s, 1)))
                    print(f"# {layer_name} T={T}: torch.compile {t_comp:.1f} ms = {flops / t_comp / 1e9:.0f} TFLOP/s "
                          f"(MFU {100 * flops / t_comp / 1e9 / PEAK:.1f}%; compiled in {compile_s:.0f} s)", flush=True)
                except Exception as ex:  # report and keep the eager figure
                    print(f"# {layer_name} T={T}: torch.compile failed: {type(ex).__name__}: {str(ex)[:300]}",
                          flush=True)
        del layer, parts
        if dev == "cuda":
            torch._dynamo.reset()
            torch.cuda.empty_cache()


def indexer_anchor():
    """The GLM-5.3 indexer alone (PERF.md's older anchor), logits + causal top-2048 in row slices."""
    HI, DI, TOPKI, HG, QLG = 32, 128, 2048, 6144, 2048
    for T2 in (16384, 65536):
        qr = torch.randn(T2, QLG, device=dev, dtype=dt)
        xg = torch.randn(T2, HG, device=dev, dtype=dt)
        Wqi, Wki, Wwp = W(HI * DI, QLG), W(DI, HG), W(HI, HG)

        def indexer(rows=2048):
            q = (qr @ Wqi.t()).view(T2, HI, DI)
            k = F.layer_norm(xg @ Wki.t(), (DI,))
            w = (xg.float() @ Wwp.float().t()) * HI ** -0.5 * DI ** -0.5
            outs = []
            for r0 in range(0, T2, rows):
                r1 = min(T2, r0 + rows)
                sc = torch.einsum("thd,sd->ths", q[r0:r1], k[:r1]).relu_()
                lg = (sc.float() * w[r0:r1, :, None]).sum(1)
                lg = lg.masked_fill(torch.arange(r1, device=dev)[None, :] > torch.arange(r0, r1, device=dev)[:, None],
                                    float("-inf"))
                outs.append(lg.topk(min(TOPKI, r1), -1).indices)
            return outs
        ti = bench(indexer, 3, 1)
        fl = 2 * HI * DI * T2 * T2 / 2
        print(f"GLM-5.3 indexer T={T2}: {ti:.1f} ms for logits+top-k ({fl / ti / 1e9:.0f} TFLOP/s on the causal half)")
        print("BASELINE_JSON " + json.dumps({"bench": "torch_indexer", "model": "glm-5.3", "tokens": T2,
                                             "op": "dsa.indexer_logits_topk", "time_ms": ti, "tflops": fl / ti / 1e9}),
              flush=True)
        del qr, xg
        torch.cuda.empty_cache()


def main():
    global ARGS, dev, dt
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", choices=list(MODELS) + ["glm-5.3-indexer"],
                    help="repeatable; default deepseek-v3")
    ap.add_argument("--configs", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                      "shared", "configs"))
    ap.add_argument("--tokens", default=os.environ.get("PENSTOCK_T", "16384"))
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--parts", action="store_true", help="also time the attention and MoE parts alone")
    ap.add_argument("--rows", type=int, default=1024, help="GLM: row block of the indexer and the sparse gather")
    ap.add_argument("--tiny", action="store_true",
                    help="tiny dims on the CPU, f32, no fla, no compile (PENSTOCK_TINY_COMPILE=1: compile too)")
    ARGS = ap.parse_args()
    tokens = [int(t) for t in ARGS.tokens.split(",")]
    if ARGS.tiny:
        dev, dt = "cpu", torch.float32
        ARGS.compile = ARGS.compile and os.environ.get("PENSTOCK_TINY_COMPILE") == "1"  # CPU inductor: slow, opt-in
        tokens = sorted({min(t, 40) for t in tokens})
        ARGS.rows = min(ARGS.rows, 16)
    for name in ARGS.model or ["deepseek-v3"]:
        print(f"# torch_layer_baseline {name} tokens {tokens} ({time.strftime('%H:%M:%S')})", flush=True)
        if name == "glm-5.3-indexer":
            indexer_anchor()
        else:
            run_model(name, ARGS.configs, tokens)


if __name__ == "__main__":
    main()
