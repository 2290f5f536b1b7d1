#!/usr/bin/env python3
"""The K3 oracle (tests/python/k3_oracle.py) with bf16 activations on the decisions Penstock recorded in fp32: the bf16
comparison for the K3 variants, which transformers 5.17 cannot run (no kimi_k3).

usage: /root/venv-fx/bin/python tools/k3_bf16_pinned.py PINDIR OUT.md MODEL_DIR ...
  POLICY=f32: the oracle in float32 on the pinned decisions (a check of the pinning: ~1e-5 from the reference).
  POLICY=bf16 (default): float32 math, every activation that Penstock's bf16 mode stores in bf16 rounded to bf16: the
    embedding rows, the residual stream / AttnRes partial sum after every add (and so the bank rows made from it),
    every normed sub-layer input, every sub-layer output. Router scores, norms, KDA state and AttnRes mix math stay
    float32, as in Penstock. Each latent-MoE row takes the recorded experts (weights from its own scores).
Reports per prompt: max |diff| vs the fixture reference (the float64 oracle), positions over 0.05, argmax mismatches."""
import json
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import k3_oracle as o  # noqa: E402

POLICY = os.environ.get("POLICY", "bf16")
F = torch.float32
o.D = F


# Which rounding points are on (POLICY=bf16): a comma list of embed, stream, normed, out, moe (default), and glu (the
# gate / up GEMM outputs of every GLU, which Penstock's bf16 mode also stores in bf16 before SiTU).
POINTS = set(os.environ.get("POINTS", "embed,stream,normed,out,moe").split(","))
# ... and in which layers (LAYERS: a comma list of layer indices, default every layer; embed is outside any layer).
LAYERS = os.environ.get("LAYERS")
CURRENT = [-1]  # the layer forward() is in


def on(point):
    return point in POINTS and (LAYERS is None or point == "embed" or str(CURRENT[0]) in LAYERS.split(","))


def r(x, point="out"):
    return x.to(torch.bfloat16).to(F) if POLICY == "bf16" and on(point) else x


def glu(x, gate_w, up_w, down_w, cfg):
    return o.situ(r(x @ gate_w.T, "glu"), r(x @ up_w.T, "glu"), cfg["activation_situ_beta"],
                  cfg["activation_situ_linear_beta"]) @ down_w.T


o.glu = glu


def pinned_moe(pins):
    def latent_moe(x, W, p, cfg):
        layer = int(p.split(".")[2])
        scores = torch.sigmoid(x @ W[p + "gate.weight"].T)
        idx = torch.stack([pins[(layer, t)] for t in range(x.shape[0])])
        w = scores.gather(1, idx)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * cfg["routed_scaling_factor"]
        z = r(x @ W[p + "routed_expert_down_proj.weight"].T, "moe")
        zo = torch.zeros_like(z)
        for t in range(x.shape[0]):
            for j in range(idx.shape[1]):
                q = f"{p}experts.{int(idx[t, j])}."
                zo[t] += w[t, j] * o.glu(z[t:t + 1], W[q + "w1.weight"], W[q + "w3.weight"], W[q + "w2.weight"], cfg)[0]
        zo = r(zo, "moe")
        if cfg["latent_moe_use_norm"]:
            zo = r(o.rms_norm(zo, W[p + "routed_expert_norm.weight"], cfg["rms_norm_eps"]), "moe")
        s = p + "shared_experts."
        shared = o.glu(x, W[s + "gate_proj.weight"], W[s + "up_proj.weight"], W[s + "down_proj.weight"], cfg)
        return zo @ W[p + "routed_expert_up_proj.weight"].T + shared
    return latent_moe


def forward(ids, W, cfg, moe):  # k3_oracle.forward with the bf16 roundings of the policy
    L, S, eps = cfg["num_hidden_layers"], cfg["attn_res_block_size"], cfg["rms_norm_eps"]
    kda_layers = set(cfg["linear_attn_config"]["kda_layers"])
    p_sum = r(W["model.embed_tokens.weight"][ids], "embed")
    bank = []
    for l in range(L):
        CURRENT[0] = l
        pre = f"model.layers.{l}."
        a_in = o.attn_res_mix(p_sum, bank, W[pre + "self_attention_res_proj.weight"][0],
                              W[pre + "self_attention_res_norm.weight"], eps) if bank else p_sum
        if l % S == 0:
            bank.append(p_sum)
            p_sum = torch.zeros_like(p_sum)
        h = r(o.rms_norm(r(a_in, "normed"), W[pre + "input_layernorm.weight"], eps), "normed")
        attn = o.kda(h, W, pre + "self_attn.", cfg) if (l + 1) in kda_layers else o.gated_mla(h, W, pre + "self_attn.",
                                                                                             cfg)
        p_sum = r(p_sum + r(attn), "stream")
        m_in = r(o.attn_res_mix(p_sum, bank, W[pre + "mlp_res_proj.weight"][0], W[pre + "mlp_res_norm.weight"], eps),
               "normed")
        h = r(o.rms_norm(m_in, W[pre + "post_attention_layernorm.weight"], eps), "normed")
        if l < cfg["first_k_dense_replace"]:
            q = pre + "mlp."
            ffn = o.glu(h, W[q + "gate_proj.weight"], W[q + "up_proj.weight"], W[q + "down_proj.weight"], cfg)
        else:
            ffn = moe(h, W, pre + "block_sparse_moe.", cfg)
        p_sum = r(p_sum + r(ffn), "stream")
    out = o.attn_res_mix(p_sum, bank, W["model.output_attn_res_proj.weight"][0], W["model.output_attn_res_norm.weight"],
                         eps)
    return o.rms_norm(out, W["model.norm.weight"], eps) @ W["lm_head.weight"].T


def main():
    pindir, out_md, models = sys.argv[1], sys.argv[2], sys.argv[3:]
    lines = []
    for d in models:
        name = os.path.basename(d.rstrip("/"))
        cfg = json.load(open(os.path.join(d, "config.json")))
        W = {}
        for k, v in load_file(os.path.join(d, "model.safetensors")).items():
            W[k.removeprefix("language_model.")] = v.to(F)  # block3_nonorm stores its tensors under a prefix
        ref = load_file(os.path.join(d, "reference.safetensors"))
        k = 0
        while f"input_ids_{k}" in ref:
            t = load_file(os.path.join(pindir, name, f"prompt{k}.safetensors"))
            pins = {(key[0], key[2]): ids.long() for key, ids in zip(t["moe.keys"].tolist(), t["moe.ids"])}
            ids = ref[f"input_ids_{k}"].long()
            want = ref[f"logits_{k}"].float()
            with torch.no_grad():
                got = forward(ids, W, cfg, pinned_moe(pins)).float()
            dd = (got - want).abs().amax(-1)
            worst = dd.max().item()
            mism = got.argmax(-1) != want.argmax(-1)
            top2 = want.topk(2, dim=-1).values
            near = int((mism & (top2[:, 0] - top2[:, 1] <= worst)).sum())
            lines.append(f"| {name} | {k} | {len(ids)} | {worst:.3e} | {int((dd > 5e-2).sum())}/{len(ids)} | "
                         f"{int(mism.sum())} ({near}) |")
            print(lines[-1])
            k += 1
    with open(out_md, "w") as f:
        f.write(f"K3 oracle, policy {POLICY}, decisions pinned to Penstock's fp32 recording\n\n| model | prompt | "
                f"tokens | max abs diff | positions > 0.05 | argmax mismatches (near-ties) |\n|---|---|---|---|---|---|\n")
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
