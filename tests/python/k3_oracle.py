#!/usr/bin/env python3
"""Independent torch oracle for the Kimi K3 extensions of `kimi_linear`, written from the formulas in
../shared/reference/MODELS.md §3 (no transformers code: tf-5.17 has no kimi_k3), and the generator of the tiny
K3-shaped fixtures in tests/data/variants_k3/ that tests/models/kimi_linear_test.cc compares against.

usage: /root/venv-fx/bin/python tests/python/k3_oracle.py [OUTDIR]   (default: tests/data/variants_k3)

The oracle computes in float64 on the stored bf16 weight values, token by token where the math is sequential:
  * KDA (§3.3): q/k/v = SiLU(causal depthwise conv(x W^T)) (zero history), l2norm(q), l2norm(k) (eps 1e-6 inside the
    sqrt), q *= head_dim^-0.5; K3 lower-bounded gate g = lb * sigmoid(exp(A_log[h]) * (f_b(f_a(x)) + dt_bias));
    beta = sigmoid(b_proj x); the plain recurrence S <- Diag(exp g) S; S <- S + beta k (v - S^T k)^T; o = S^T q;
    o = RMSNorm_head(o) * o_norm * sigmoid(g_proj x) (full-rank output gate); o_proj.
  * Gated NoPE MLA (§3.4): q = q_b(RMSNorm(q_a x)) (eps 1e-6), latent = kv_a x, c = RMSNorm(c) (eps 1e-6), k_shared =
    the unrotated last qk_rope dims, K_h = [c W_UK_h^T ; k_shared], V_h = c W_UV_h^T, causal softmax with scale
    (nope + rope)^-0.5, attn *= sigmoid(x g_proj^T), o_proj.
  * SiTU (§3.5): beta tanh(g / beta) sigmoid(g) * beta_l tanh(u / beta_l), in the dense layer, shared and routed experts.
  * Latent MoE (§3.5): sigmoid router + e_score_correction_bias top-k, weights from the unbiased scores, renormalised,
    x routed_scaling_factor; experts on z = x W_down^T; RMSNorm(sum) (routed_expert_norm, rms_norm_eps); W_up; + shared(x).
  * Block AttnRes (§3.6 pseudo-code): bank rows appended at l % S == 0, per-sub-layer pseudo-query softmax over
    [bank ; partial] with RMSNorm'd keys (rms_norm_eps), raw values; output read before the final norm.
Weights: normal(0, 0.5/sqrt(fan_in)); every norm weight uniform(0.5, 1.5); pseudo-queries normal(0, 1/sqrt(H)) (not
zero, so the depth softmax is not uniform); e_score_correction_bias normal(0, 0.1); A_log = log(uniform(1, 16));
dt_bias = inverse softplus of uniform(1e-3, 1e-1) dt; all bf16. Prompts 1, 9, 70, 130 tokens. Deterministic.
"""
import json, math, os, shutil, sys

import torch
from safetensors.torch import save_file

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
D = torch.float64

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(HERE, "..", "data", "variants_k3")
PROMPTS = [1, 9, 70, 130]


# ---------------------------------------------------------------------------------------------------- math pieces
def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def situ(g, u, beta, beta_l):
    return beta * torch.tanh(g / beta) * torch.sigmoid(g) * beta_l * torch.tanh(u / beta_l)


def glu(x, gate_w, up_w, down_w, cfg):
    return situ(x @ gate_w.T, x @ up_w.T, cfg["activation_situ_beta"], cfg["activation_situ_linear_beta"]) @ down_w.T


def causal_conv_silu(x, w):  # x [T, C], w [C, K]: out[t] = sum_j w[:, j] x[t - K + 1 + j]
    T, C = x.shape
    K = w.shape[1]
    xp = torch.cat([torch.zeros(K - 1, C, dtype=x.dtype), x], 0)
    out = torch.stack([(xp[t:t + K] * w.T).sum(0) for t in range(T)])
    return out * torch.sigmoid(out)


def kda(x, W, p, cfg):
    la = cfg["linear_attn_config"]
    H, Dh = la["num_heads"], la["head_dim"]
    T = x.shape[0]
    q = causal_conv_silu(x @ W[p + "q_proj.weight"].T, W[p + "q_conv1d.weight"][:, 0]).view(T, H, Dh)
    k = causal_conv_silu(x @ W[p + "k_proj.weight"].T, W[p + "k_conv1d.weight"][:, 0]).view(T, H, Dh)
    v = causal_conv_silu(x @ W[p + "v_proj.weight"].T, W[p + "v_conv1d.weight"][:, 0]).view(T, H, Dh)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * Dh ** -0.5
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    f = ((x @ W[p + "f_a_proj.weight"].T) @ W[p + "f_b_proj.weight"].T + W[p + "dt_bias"]).view(T, H, Dh)
    g = la["gate_lower_bound"] * torch.sigmoid(torch.exp(W[p + "A_log"]).view(1, H, 1) * f)
    beta = torch.sigmoid(x @ W[p + "b_proj.weight"].T)  # [T, H]
    S = torch.zeros(H, Dh, Dh, dtype=D)
    o = torch.zeros(T, H, Dh, dtype=D)
    for t in range(T):
        S = S * torch.exp(g[t])[:, :, None]
        delta = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", S, k[t]))
        S = S + k[t][:, :, None] * delta[:, None, :]
        o[t] = torch.einsum("hkv,hk->hv", S, q[t])
    gate = (x @ W[p + "g_proj.weight"].T).view(T, H, Dh)
    o = rms_norm(o, W[p + "o_norm.weight"], cfg["rms_norm_eps"]) * torch.sigmoid(gate)
    return o.reshape(T, H * Dh) @ W[p + "o_proj.weight"].T


def gated_mla(x, W, p, cfg):
    T = x.shape[0]
    nh, nope, rope, vd, r = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                             cfg["v_head_dim"], cfg["kv_lora_rank"])
    cq = rms_norm(x @ W[p + "q_a_proj.weight"].T, W[p + "q_a_layernorm.weight"], 1e-6)
    q = (cq @ W[p + "q_b_proj.weight"].T).view(T, nh, nope + rope)
    kv = x @ W[p + "kv_a_proj_with_mqa.weight"].T
    c = rms_norm(kv[:, :r], W[p + "kv_a_layernorm.weight"], 1e-6)
    k_shared = kv[:, r:]  # NoPE: never rotated
    kvb = (c @ W[p + "kv_b_proj.weight"].T).view(T, nh, nope + vd)
    k = torch.cat([kvb[..., :nope], k_shared[:, None, :].expand(T, nh, rope)], -1)
    v = kvb[..., nope:]
    scores = torch.einsum("thd,shd->hts", q, k) * (nope + rope) ** -0.5
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    attn = torch.einsum("hts,shd->thd", torch.softmax(scores, -1), v).reshape(T, nh * vd)
    attn = attn * torch.sigmoid(x @ W[p + "g_proj.weight"].T)
    return attn @ W[p + "o_proj.weight"].T


def latent_moe(x, W, p, cfg):
    E, top_k = cfg["num_experts"], cfg["num_experts_per_token"]
    scores = torch.sigmoid(x @ W[p + "gate.weight"].T)
    choice = scores + W[p + "gate.e_score_correction_bias"]
    idx = torch.topk(choice, top_k, dim=-1).indices
    w = scores.gather(1, idx)
    w = w / (w.sum(-1, keepdim=True) + 1e-20) * cfg["routed_scaling_factor"]
    z = x @ W[p + "routed_expert_down_proj.weight"].T
    zo = torch.zeros_like(z)
    for t in range(x.shape[0]):
        for j in range(top_k):
            e = int(idx[t, j])
            q = f"{p}experts.{e}."
            zo[t] += w[t, j] * glu(z[t:t + 1], W[q + "w1.weight"], W[q + "w3.weight"], W[q + "w2.weight"], cfg)[0]
    if cfg["latent_moe_use_norm"]:
        zo = rms_norm(zo, W[p + "routed_expert_norm.weight"], cfg["rms_norm_eps"])
    s = p + "shared_experts."
    shared = glu(x, W[s + "gate_proj.weight"], W[s + "up_proj.weight"], W[s + "down_proj.weight"], cfg)
    return zo @ W[p + "routed_expert_up_proj.weight"].T + shared


def attn_res_mix(partial, bank, w, gamma, eps):  # partial [T, H], bank list of [T, H]
    V = torch.stack(bank + [partial], 1)  # [T, n + 1, H]
    logits = (rms_norm(V, gamma, eps) * w).sum(-1)  # [T, n + 1]
    return (torch.softmax(logits, -1)[..., None] * V).sum(1)


def forward(ids, W, cfg):
    L, S, eps = cfg["num_hidden_layers"], cfg["attn_res_block_size"], cfg["rms_norm_eps"]
    kda_layers = set(cfg["linear_attn_config"]["kda_layers"])
    p_sum = W["model.embed_tokens.weight"][ids]
    bank = []
    for l in range(L):
        pre = f"model.layers.{l}."
        a_in = attn_res_mix(p_sum, bank, W[pre + "self_attention_res_proj.weight"][0],
                            W[pre + "self_attention_res_norm.weight"], eps) if bank else p_sum
        if l % S == 0:
            bank.append(p_sum)
            p_sum = torch.zeros_like(p_sum)
        h = rms_norm(a_in, W[pre + "input_layernorm.weight"], eps)
        attn = kda(h, W, pre + "self_attn.", cfg) if (l + 1) in kda_layers else gated_mla(h, W, pre + "self_attn.", cfg)
        p_sum = p_sum + attn
        m_in = attn_res_mix(p_sum, bank, W[pre + "mlp_res_proj.weight"][0], W[pre + "mlp_res_norm.weight"], eps)
        h = rms_norm(m_in, W[pre + "post_attention_layernorm.weight"], eps)
        if l < cfg["first_k_dense_replace"]:
            q = pre + "mlp."
            ffn = glu(h, W[q + "gate_proj.weight"], W[q + "up_proj.weight"], W[q + "down_proj.weight"], cfg)
        else:
            ffn = latent_moe(h, W, pre + "block_sparse_moe.", cfg)
        p_sum = p_sum + ffn
    out = attn_res_mix(p_sum, bank, W["model.output_attn_res_proj.weight"][0], W["model.output_attn_res_norm.weight"],
                       eps)
    return rms_norm(out, W["model.norm.weight"], eps) @ W["lm_head.weight"].T


# ---------------------------------------------------------------------------------------------------- checkpoint
def shapes(cfg):
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    la = cfg["linear_attn_config"]
    nhk, dk, K = la["num_heads"], la["head_dim"], la["short_conv_kernel_size"]
    C = nhk * dk
    nh, nope, rope, vd, r, qr = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                                 cfg["v_head_dim"], cfg["kv_lora_rank"], cfg["q_lora_rank"])
    E, I, Z = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["routed_expert_hidden_size"]
    s = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H], "lm_head.weight": [V, H],
         "model.output_attn_res_proj.weight": [1, H], "model.output_attn_res_norm.weight": [H]}
    for l in range(L):
        p = f"model.layers.{l}."
        for n in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"):
            s[p + n + ".weight"] = [H]
        s[p + "self_attention_res_proj.weight"] = [1, H]
        s[p + "mlp_res_proj.weight"] = [1, H]
        a = p + "self_attn."
        if (l + 1) in la["kda_layers"]:
            for n in "qkv":
                s[a + n + "_proj.weight"] = [C, H]
                s[a + n + "_conv1d.weight"] = [C, 1, K]
            s.update({a + "f_a_proj.weight": [dk, H], a + "f_b_proj.weight": [C, dk], a + "A_log": [nhk],
                      a + "dt_bias": [C], a + "b_proj.weight": [nhk, H], a + "g_proj.weight": [C, H],
                      a + "o_norm.weight": [dk], a + "o_proj.weight": [H, C]})
        else:
            s.update({a + "q_a_proj.weight": [qr, H], a + "q_a_layernorm.weight": [qr],
                      a + "q_b_proj.weight": [nh * (nope + rope), qr], a + "kv_a_proj_with_mqa.weight": [r + rope, H],
                      a + "kv_a_layernorm.weight": [r], a + "kv_b_proj.weight": [nh * (nope + vd), r],
                      a + "g_proj.weight": [nh * vd, H], a + "o_proj.weight": [H, nh * vd]})
        if l < cfg["first_k_dense_replace"]:
            m = p + "mlp."
            s.update({m + "gate_proj.weight": [cfg["intermediate_size"], H],
                      m + "up_proj.weight": [cfg["intermediate_size"], H],
                      m + "down_proj.weight": [H, cfg["intermediate_size"]]})
        else:
            m = p + "block_sparse_moe."
            sh = I * cfg["num_shared_experts"]
            s.update({m + "gate.weight": [E, H], m + "gate.e_score_correction_bias": [E],
                      m + "routed_expert_down_proj.weight": [Z, H], m + "routed_expert_up_proj.weight": [H, Z],
                      m + "shared_experts.gate_proj.weight": [sh, H], m + "shared_experts.up_proj.weight": [sh, H],
                      m + "shared_experts.down_proj.weight": [H, sh]})
            if cfg["latent_moe_use_norm"]:
                s[m + "routed_expert_norm.weight"] = [Z]
            for e in range(E):
                s.update({f"{m}experts.{e}.w1.weight": [I, Z], f"{m}experts.{e}.w3.weight": [I, Z],
                          f"{m}experts.{e}.w2.weight": [Z, I]})
    return s


def random_weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    W = {}
    for name, shape in shapes(cfg).items():
        if name.endswith("A_log"):
            t = torch.log(torch.rand(shape, generator=g) * 15 + 1)
        elif name.endswith("dt_bias"):
            dt = torch.exp(torch.rand(shape, generator=g) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            t = dt + torch.log(-torch.expm1(-dt))  # inverse softplus
        elif name.endswith("e_score_correction_bias"):
            t = torch.randn(shape, generator=g) * 0.1
        elif name.endswith("res_proj.weight"):
            t = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
        elif name.endswith("norm.weight"):
            t = torch.rand(shape, generator=g) + 0.5
        else:
            t = torch.randn(shape, generator=g) * (0.5 / math.sqrt(shape[-1]))
        W[name] = t.to(torch.bfloat16)
    return W


def build(name, cfg, seed, what, key_prefix=""):
    W = random_weights(cfg, seed)
    W64 = {k: v.to(D) for k, v in W.items()}
    g = torch.Generator().manual_seed(seed + 1)
    ref = {}
    for i, n in enumerate(PROMPTS):
        ids = torch.randint(0, cfg["vocab_size"], (n,), generator=g)
        with torch.no_grad():
            ref[f"input_ids_{i}"] = ids.to(torch.int64)
            ref[f"logits_{i}"] = forward(ids, W64, cfg).to(torch.float32).contiguous()
    d = os.path.join(OUT, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    save_file({key_prefix + k: v.contiguous() for k, v in W.items()}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})
    save_file(ref, os.path.join(d, "reference.safetensors"))
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2, sort_keys=True)
    json.dump({"name": name, "generator": "tests/python/k3_oracle.py (float64 torch " + torch.__version__ + ")",
               "exercises": what, "prompts": PROMPTS, "seed": seed, "n_tensors": len(W), "key_prefix": key_prefix},
              open(os.path.join(d, "reference.json"), "w"), indent=1)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{name}: {len(W)} tensors, {size / 1024:.0f} KiB")
    assert size < 1 << 20


def k3_config(**over):
    cfg = {"model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"], "vocab_size": 256,
           "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 24, "num_hidden_layers": 5,
           "num_attention_heads": 3, "num_key_value_heads": 3, "q_lora_rank": 24, "kv_lora_rank": 16,
           "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "num_experts": 6,
           "num_experts_per_token": 2, "num_shared_experts": 2, "num_expert_group": 1, "topk_group": 1,
           "moe_renormalize": True, "routed_scaling_factor": 1.0, "moe_router_activation_func": "sigmoid",
           "first_k_dense_replace": 1, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
           "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
           "mla_use_nope": True, "mla_use_output_gate": True, "attn_res_block_size": 2,
           "routed_expert_hidden_size": 40, "latent_moe_use_norm": True,
           "linear_attn_config": {"head_dim": 16, "num_heads": 3, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
                                  "use_full_rank_gate": True, "kda_layers": [1, 2, 3], "full_attn_layers": [4, 5]}}
    cfg.update(over)
    return cfg


VARIANTS = [
    ("k3_tiny_block2", k3_config(), 51,
     "every K3 extension: AttnRes block 2 (3 bank rows + partial at the output), gated NoPE MLA with q_lora at layers "
     "4-5 (1-based; the last two both MLA), lower-bound KDA gate with full-rank g_proj, SiTU everywhere, latent MoE "
     "with norm", ""),
    ("k3_tiny_block3_nonorm", k3_config(attn_res_block_size=3, latent_moe_use_norm=False, num_hidden_layers=4,
                                        activation_situ_beta=2.0, activation_situ_linear_beta=6.0,
                                        linear_attn_config={"head_dim": 16, "num_heads": 2, "short_conv_kernel_size": 4,
                                                            "gate_lower_bound": -3.0, "use_full_rank_gate": True,
                                                            "kda_layers": [2, 3], "full_attn_layers": [1, 4]}),
     52, "AttnRes block 3 (appends at layers 0 and 3), latent MoE without norm, other SiTU betas and gate bound, MLA "
         "first and last; tensor names prefixed 'language_model.' as in the multimodal K3 checkpoint",
     "language_model."),
]

if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for name, cfg, seed, what, key_prefix in VARIANTS:
        build(name, cfg, seed, what, key_prefix)
