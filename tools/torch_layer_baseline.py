"""Same-run torch baselines at real dimensions on one H200: a DeepSeek-V3 MLA+MoE layer (MHA-form MLA through cuDNN
SDPA, MoE through torch._grouped_mm) and the GLM-5.3 DSA indexer (logits + causal top-k, row-sliced), bf16, random data.

Copied from ../shared/tools/torch_layer_baseline.py (PERF.md's baseline, our own shared file) with three changes only:
T from $PENSTOCK_T (default 16384), the GLM-5.3 indexer part skipped when $PENSTOCK_SKIP_INDEXER=1, and one JSON line
per result ("BASELINE_JSON {...}") for tools/perf_layer_table.py. The timed code is unchanged."""
import json, math, os, time, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
dev = "cuda"; dt = torch.bfloat16
torch.manual_seed(0)

def bench(fn, iters=10, warm=3):
    for _ in range(warm): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); return ts[len(ts) // 2]

def W(o, i): return (torch.randn(o, i, device=dev, dtype=dt) / math.sqrt(i))
def rms(x, w, eps=1e-6):
    xf = x.float(); return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(dt) * w

H, NH, QL, KL, DN, DR, DV = 7168, 128, 1536, 512, 128, 64, 128
E, TOPK, I, NG, TG = 256, 8, 2048, 8, 4
T = int(os.environ.get("PENSTOCK_T", "16384"))
x = torch.randn(T, H, device=dev, dtype=dt)
w_in = torch.ones(H, device=dev, dtype=dt); w_post = torch.ones(H, device=dev, dtype=dt)
Wqa, Wqb = W(QL, H), W(NH * (DN + DR), QL); wqn = torch.ones(QL, device=dev, dtype=dt)
Wkva, Wkvb = W(KL + DR, H), W(NH * (DN + DV), KL); wkvn = torch.ones(KL, device=dev, dtype=dt)
Wo = W(H, NH * DV)
Wg = W(E, H); bias = torch.randn(E, device=dev) * 0.1
Wgu = torch.randn(E, H, 2 * I, device=dev, dtype=dt) / math.sqrt(H)   # grouped_mm wants [E, K, N]
Wd = torch.randn(E, I, H, device=dev, dtype=dt) / math.sqrt(I)
Wsgu, Wsd = W(2 * I, H), W(H, I)
pos = torch.arange(T, device=dev)
inv = 1.0 / (10000 ** (torch.arange(0, DR, 2, device=dev).float() / DR))
ang = pos[:, None].float() * inv[None]; cos, sin = ang.cos().to(dt), ang.sin().to(dt)
def rope(t):  # t [..., DR] half-split
    a, b = t[..., : DR // 2], t[..., DR // 2:]
    c = cos.view(T, *([1] * (t.dim() - 2)), DR // 2); s = sin.view(T, *([1] * (t.dim() - 2)), DR // 2)
    return torch.cat([a * c - b * s, a * s + b * c], -1)

def attn_part(h):
    cq = rms(h @ Wqa.t(), wqn)
    q = (cq @ Wqb.t()).view(T, NH, DN + DR)
    kv = h @ Wkva.t(); c, kpe = kv[:, :KL], kv[:, KL:]
    c = rms(c, wkvn)
    kvb = (c @ Wkvb.t()).view(T, NH, DN + DV)
    qn, qp = q[..., :DN], rope(q[..., DN:])
    kn, v = kvb[..., :DN], kvb[..., DN:]
    kp = rope(kpe).view(T, 1, DR).expand(T, NH, DR)
    Q = torch.cat([qn, qp], -1).transpose(0, 1).unsqueeze(0)
    K = torch.cat([kn, kp], -1).transpose(0, 1).unsqueeze(0)
    V = v.transpose(0, 1).unsqueeze(0)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
    return o[0].transpose(0, 1).reshape(T, NH * DV) @ Wo.t()

def moe_part(h):
    logits = h.float() @ Wg.float().t(); s = logits.sigmoid(); sb = s + bias
    g = sb.view(T, NG, E // NG).topk(2, -1).values.sum(-1)
    keep = torch.zeros_like(g).scatter_(1, g.topk(TG, -1).indices, 1.0)
    sb = sb.masked_fill(keep.repeat_interleave(E // NG, 1) == 0, float("-inf"))
    idx = sb.topk(TOPK, -1).indices; wts = s.gather(1, idx); wts = wts / wts.sum(-1, keepdim=True) * 2.5
    flat = idx.view(-1); order = flat.argsort(); tok = order // TOPK
    counts = torch.bincount(flat, minlength=E); offs = counts.cumsum(0).to(torch.int32)
    xs = h[tok]
    gu = torch._grouped_mm(xs, Wgu, offs=offs)
    a = F.silu(gu[:, :I]) * gu[:, I:]
    y = torch._grouped_mm(a, Wd, offs=offs)
    y = y * wts.view(-1)[order].unsqueeze(1).to(dt)
    out = torch.zeros(T, H, device=dev, dtype=torch.float32).index_add_(0, tok, y.float()).to(dt)
    sg = h @ Wsgu.t(); out = out + (F.silu(sg[:, :I]) * sg[:, I:]) @ Wsd.t()
    return out

def layer():
    h = x + attn_part(rms(x, w_in))
    return h + moe_part(rms(h, w_post))

flops_attn_proj = 2 * T * (H * QL + QL * NH * (DN + DR) + H * (KL + DR) + KL * NH * (DN + DV) + NH * DV * H)
flops_attn_core = 2 * NH * (DN + DR + DV) * T * T / 2
flops_moe = 2 * T * (TOPK * 3 * H * I + 3 * H * I + H * E)
tot = flops_attn_proj + flops_attn_core + flops_moe
ta = bench(lambda: attn_part(x), 5); tm = bench(lambda: moe_part(x), 5); tl = bench(layer, 5)
print(f"DeepSeek-V3 layer T={T}: attention {ta:.1f} ms ({(flops_attn_proj+flops_attn_core)/ta/1e9:.0f} TFLOP/s), "
      f"MoE {tm:.1f} ms ({flops_moe/tm/1e9:.0f} TFLOP/s), layer {tl:.1f} ms = {tot/tl/1e9:.0f} TFLOP/s "
      f"(MFU {tot/tl/1e9/989*100:.1f}% of 989, {tot/tl/1e9/754*100:.1f}% of measured 754)")
def emit(op, ms, flops):
    print("BASELINE_JSON " + json.dumps({"bench": "torch_layer", "model": "deepseek-v3", "tokens": T, "op": op,
                                         "time_ms": ms, "tflops": flops / ms / 1e9, "torch": torch.__version__,
                                         "gpu": torch.cuda.get_device_name()}), flush=True)
emit("part.attention", ta, flops_attn_proj + flops_attn_core); emit("part.moe", tm, flops_moe); emit("layer", tl, tot)
try:
    cl = torch.compile(layer)
    tc = bench(cl, 5, 3)
    print(f"  torch.compile layer: {tc:.1f} ms = {tot/tc/1e9:.0f} TFLOP/s")
    emit("layer.compiled", tc, tot)
except Exception as ex:
    print("  torch.compile failed:", str(ex)[:200])
del Wgu, Wd
torch.cuda.empty_cache()
if os.environ.get("PENSTOCK_SKIP_INDEXER") == "1":
    raise SystemExit(0)

# GLM-5.3 DSA indexer at T tokens, prefix 0: logits [T, T] in row slices, causal top-2048
HI, DI, TOPKI, HG, QLG = 32, 128, 2048, 6144, 2048
for T2 in (16384, 65536):
    qr = torch.randn(T2, QLG, device=dev, dtype=dt); xg = torch.randn(T2, HG, device=dev, dtype=dt)
    Wqi, Wki, Wwp = W(HI * DI, QLG), W(DI, HG), W(HI, HG)
    def indexer(rows=2048):
        q = (qr @ Wqi.t()).view(T2, HI, DI); k = F.layer_norm(xg @ Wki.t(), (DI,)); w = (xg.float() @ Wwp.float().t()) * HI ** -0.5 * DI ** -0.5
        outs = []
        for r0 in range(0, T2, rows):
            r1 = min(T2, r0 + rows); L = r1  # causal: keys [0, r1)
            sc = torch.einsum("thd,sd->ths", q[r0:r1], k[:L]).relu_()
            lg = (sc.float() * w[r0:r1, :, None]).sum(1)
            lg = lg.masked_fill(torch.arange(L, device=dev)[None, :] > torch.arange(r0, r1, device=dev)[:, None], float("-inf"))
            outs.append(lg.topk(min(TOPKI, L), -1).indices)
        return outs
    ti = bench(indexer, 3, 1)
    fl = 2 * HI * DI * T2 * T2 / 2
    print(f"GLM-5.3 indexer T={T2}: {ti:.1f} ms for logits+top-k ({fl/ti/1e9:.0f} TFLOP/s on the causal half)")
    print("BASELINE_JSON " + json.dumps({"bench": "torch_indexer", "model": "glm-5.3", "tokens": T2,
                                         "op": "dsa.indexer_logits_topk", "time_ms": ti, "tflops": fl / ti / 1e9}),
          flush=True)
    del qr, xg
    torch.cuda.empty_cache()
