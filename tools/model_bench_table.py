#!/usr/bin/env python3
"""Markdown table for docs/perf from tools/model_bench_run.sh's output folder: per layer and chunk, time, input tok/s,
useful FLOPs (counted from the config, below) and MFU against the H200's 989 dense bf16 TFLOP/s, and the same-run
torch DeepSeek-V3 layer baseline (BASELINE_JSON lines of model_bench.log) where one exists.

FLOPs counted (2 per multiply-add, causal attention over the visible half, the work the layer must do, not what a
kernel happens to do): every projection GEMM per token; MLA attention in the MHA form (kv_b expansion of every key,
QK^T + PV over the causal half) or the absorbed form (q and output absorption, 576/512-wide QK^T + PV); DSA: the
indexer's q/k/weights projections and QK^T over the causal half, and the sparse MLA over min(top-k, visible) keys;
KDA: the projections only (the chunked delta-rule recurrence is not counted: its FLOPs depend on the chunk
algorithm), MoE: router + top-k routed experts (+ the K3 latent down/up projections) + shared experts.
  python3 tools/model_bench_table.py OUT_DIR CONFIG_DIR
"""
import glob, json, os, sys

PEAK = 989.0


def attn_pairs(T, P):  # visible (query, key) pairs of a causal chunk of T after P cached tokens
    return T * P + T * (T + 1) / 2


def sparse_pairs(T, P, k):
    return sum(min(k, P + i + 1) for i in range(T))


def layer_flops(c, layers, T, P, form):
    layer = layers[0]
    H = c["hidden_size"]
    f = 0.0
    nh = c["num_attention_heads"]
    ql, kl = c.get("q_lora_rank") or 0, c["kv_lora_rank"]
    dn, dr, dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    lin = c.get("linear_attn_config")
    kda = lin is not None and (layer + 1) in lin.get("kda_layers", [])
    glm = c["model_type"] in ("glm_moe_dsa", "deepseek_v32")
    if kda:
        qkv = lin["num_heads"] * lin["head_dim"]
        hd = lin["head_dim"]
        per_tok = 3 * H * qkv + H * hd + hd * qkv + H * lin["num_heads"] + qkv * H
        per_tok += H * qkv if lin.get("use_full_rank_gate") else (H * hd + hd * qkv)
        f += 2 * per_tok * T
    else:
        per_tok = (H * ql + ql * nh * (dn + dr)) if ql else H * nh * (dn + dr)
        per_tok += H * (kl + dr) + nh * dv * H
        if c.get("mla_use_output_gate"):
            per_tok += H * nh * dv
        f += 2 * per_tok * T
        sparse = glm and (P + T) > c["index_topk"]
        if glm:
            ih, ihd = c.get("index_n_heads", 32), c.get("index_head_dim", 128)
            f += 2 * T * (ql * ih * ihd + H * ihd + H * ih)
            f += 2 * ih * ihd * attn_pairs(T, P)
        if sparse:
            f += 2 * T * nh * (dn * kl + kl * dv)
            f += 2 * nh * (kl + dr + kl) * sparse_pairs(T, P, c["index_topk"])
        elif form == "absorbed":
            f += 2 * T * nh * (dn * kl + kl * dv)
            f += 2 * nh * (kl + dr + kl) * attn_pairs(T, P)
        else:
            f += 2 * (P + T) * kl * nh * (dn + dv)
            f += 2 * nh * (dn + dr + dv) * attn_pairs(T, P)
    # FFN (MoE when past the dense prefix)
    dense_k = c.get("first_k_dense_replace", 0)
    n_exp = c.get("n_routed_experts") or c.get("num_experts") or 0
    topk = c.get("num_experts_per_tok") or c.get("num_experts_per_token") or 0
    inter = c["moe_intermediate_size"]
    if layer >= dense_k and n_exp:
        eh = c.get("routed_expert_hidden_size") or H
        per_tok = H * n_exp + topk * 3 * eh * inter
        if eh != H:
            per_tok += 2 * H * eh
        shared = c.get("n_shared_experts") or c.get("num_shared_experts") or 0
        per_tok += shared * 3 * H * inter
        f += 2 * per_tok * T
    else:
        f += 2 * 3 * H * c["intermediate_size"] * T
    return f


def main():
    out, cfgdir = sys.argv[1], sys.argv[2]
    base = {}
    for line in open(os.path.join(out, "model_bench.log")):
        if line.startswith("BASELINE_JSON "):
            j = json.loads(line[len("BASELINE_JSON "):])
            base[(j["model"], j["tokens"], j["op"])] = j["time_ms"]
    cfg_of = {"deepseek-v3": "deepseek-v3", "glm-5.3": "glm-5.3", "kimi-k3": "kimi-k3"}
    print("| layer | layers | chunk T | prefix | MLA form | Penstock ms | input tok/s | TFLOP/s | MFU | torch eager ms | "
          "torch.compile ms | vs eager | vs compile |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        for r in json.load(open(path)):
            fam = next(k for k in cfg_of if r["model"].startswith(k))
            c = json.load(open(os.path.join(cfgdir, cfg_of[fam] + ".json")))
            T, P = r["tokens"], r["prefix"]
            fl = layer_flops(c, r["layers"], T, P, r["mla_form"])
            ms = r["median_ms"]
            tf = fl / ms / 1e9
            e = base.get((fam, T, "layer")) if fam == "deepseek-v3" and r["mla_form"] == "mha" else None
            cc = base.get((fam, T, "layer.compiled")) if e else None
            print(f"| {r['model']} | [{r['layers'][0]}, {r['layers'][1]}) | {T} | {P} | {r['mla_form']} | {ms:.1f} | "
                  f"{r['input_tok_per_s']:.0f} | {tf:.0f} | {100 * tf / PEAK:.1f}% | "
                  f"{f'{e:.1f}' if e else '–'} | {f'{cc:.1f}' if cc else '–'} | "
                  f"{f'{e / ms:.2f}x' if e else '–'} | {f'{cc / ms:.2f}x' if cc else '–'} |")


if __name__ == "__main__":
    main()
