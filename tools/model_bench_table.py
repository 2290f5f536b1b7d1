#!/usr/bin/env python3
"""Markdown tables for docs/perf from tools/model_bench_run.sh's output folder: per layer and chunk, time, input tok/s,
useful FLOPs (counted from the config, below) and MFU against the H200's 989 dense bf16 TFLOP/s, beside the same-run
torch composition of the same layer (tools/torch_layer_baseline.py's BASELINE_JSON lines in model_bench.log: eager,
torch.compile'd, and the ratio to each); then the torch rows alone, the ratio per layer against PERF.md's goal (the
faster of eager and compiled torch is the baseline), and with --breakdown the per-scope tables of rows that carry one.
tools/torch_layer_baseline.py imports layer_flops from here, so both sides count the same FLOPs.

FLOPs counted (2 per multiply-add, causal attention over the visible half, the work the layer must do, not what a
kernel happens to do): every projection GEMM per token; MLA attention in the MHA form (kv_b expansion of every key,
QK^T + PV over the causal half) or the absorbed form (q and output absorption, 576/512-wide QK^T + PV); DSA: the
indexer's q/k/weights projections and QK^T over the causal half, and the sparse MLA over min(top-k, visible) keys;
KDA: the projections only (the chunked delta-rule recurrence is not counted: its FLOPs depend on the chunk
algorithm), MoE: router + top-k routed experts (+ the K3 latent down/up projections) + shared experts.
  python3 tools/model_bench_table.py OUT_DIR CONFIG_DIR [--breakdown]
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


# PERF.md's goal per torch-composed layer: (minimum ratio of torch's best time to Penstock's, the goal's words).
GOALS = {
    "deepseek-v3.mla-moe": (1.2, "≥ 1.2× the torch.compile'd composition"),
    "glm-5.3.dsa-moe": (5.0, "≥ 5× the torch composition (DSA)"),
    "kimi-k3.kda-moe": (1.5, "≥ 1.5× torch + fla chunk_kda"),
    "kimi-k3.mla-moe": (1.2, "≥ 1.2× the torch composition (whole-layer goal)"),
}


def load_baselines(out):
    """(layer, tokens, op) -> time_ms from BASELINE_JSON lines; older logs without "layer" were DeepSeek-V3's."""
    base = {}
    log = os.path.join(out, "model_bench.log")
    if not os.path.exists(log):
        return base
    for line in open(log):
        if line.startswith("BASELINE_JSON "):
            j = json.loads(line[len("BASELINE_JSON "):])
            layer = j.get("layer") or ("deepseek-v3.mla-moe" if j.get("model") == "deepseek-v3" else j.get("model"))
            base[(layer, j["tokens"], j["op"])] = j["time_ms"]
    return base


def torch_layer_of(name):
    """The torch-composed layer a Penstock row compares with (its name, or the name it extends: .absorbed, .fp8idx)."""
    return next((k for k in GOALS if name == k or name.startswith(k + ".")), None)


def fmt(v, spec=".1f", suffix=""):
    return f"{v:{spec}}{suffix}" if v else "–"


def rows_of(out):
    """Every row of OUT/*.json; a row with native FP8 weights (penstock_model_bench --fp8-weights) is named <model>.fp8."""
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        for r in json.load(open(path)):
            if r.get("fp8_weights") == "native":
                r = dict(r, model=r["model"] + ".fp8")
            yield r


def main():
    out, cfgdir = sys.argv[1], sys.argv[2]
    base = load_baselines(out)
    cfg_of = {"deepseek-v3": "deepseek-v3", "glm-5.3": "glm-5.3", "kimi-k3": "kimi-k3"}
    config = lambda fam: json.load(open(os.path.join(cfgdir, cfg_of[fam] + ".json")))
    family = lambda name: next(k for k in cfg_of if name.startswith(k))
    print("| layer | layers | chunk T | prefix | MLA form | Penstock ms | input tok/s | TFLOP/s | MFU | torch eager ms | "
          "torch.compile ms | vs eager | vs compile |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    best = {}  # (layer, T) -> (Penstock ms, torch best ms, MFU) for the goals table
    for r in rows_of(out):
        c = config(family(r["model"]))
        T, P = r["tokens"], r["prefix"]
        ms = r["median_ms"]
        tf = layer_flops(c, r["layers"], T, P, r["mla_form"]) / ms / 1e9
        tl = torch_layer_of(r["model"]) if P == 0 else None
        e = base.get((tl, T, "layer")) if tl else None
        cc = base.get((tl, T, "layer.compiled")) if tl else None
        print(f"| {r['model']} | [{r['layers'][0]}, {r['layers'][1]}) | {T} | {P} | {r['mla_form']} | {ms:.1f} | "
              f"{r['input_tok_per_s']:.0f} | {tf:.0f} | {100 * tf / PEAK:.1f}% | {fmt(e)} | {fmt(cc)} | "
              f"{fmt(e and e / ms, '.2f', 'x')} | {fmt(cc and cc / ms, '.2f', 'x')} |")
        if tl and (e or cc):
            tb = min(t for t in (e, cc) if t)
            key = (r["model"], T)
            best[key] = (ms, tb, 100 * tf / PEAK, tl, "compiled" if tb == cc else "eager")

    if base:
        print("\n| torch composition | chunk T | eager ms | eager TFLOP/s (MFU) | torch.compile ms | compiled TFLOP/s (MFU) |")
        print("|---|---|---|---|---|---|")
        for (layer, T, op) in sorted(k for k in base if k[2] == "layer" and k[0] in GOALS):
            fam = family(layer)
            index = {"deepseek-v3.mla-moe": 3, "glm-5.3.dsa-moe": 6, "kimi-k3.kda-moe": 1, "kimi-k3.mla-moe": 3}[layer]
            fl = layer_flops(config(fam), [index, index + 1], T, 0, "mha")
            e, cc = base[(layer, T, op)], base.get((layer, T, "layer.compiled"))
            te = fl / e / 1e9
            tc = fl / cc / 1e9 if cc else 0
            print(f"| {layer} | {T} | {e:.1f} | {te:.0f} ({100 * te / PEAK:.1f}%) | {fmt(cc)} | "
                  f"{f'{tc:.0f} ({100 * tc / PEAK:.1f}%)' if cc else '–'} |")

    if best:
        print("\n| layer (Penstock row) | chunk T | Penstock ms (MFU) | torch best ms | ratio | PERF.md goal | met |")
        print("|---|---|---|---|---|---|---|")
        for (name, T), (ms, tb, mfu, tl, which) in sorted(best.items()):
            goal, words = GOALS[tl]
            ratio = tb / ms
            print(f"| {name} | {T} | {ms:.1f} ({mfu:.1f}%) | {tb:.1f} ({which}) | {ratio:.2f}× | {words} | "
                  f"{'yes' if ratio >= goal else 'no'} |")

    if "--breakdown" in sys.argv[3:]:
        for r in rows_of(out):
            if "breakdown" not in r:
                continue
            print(f"\n**{r['model']}**, layers [{r['layers'][0]}, {r['layers'][1]}), T = {r['tokens']}, prefix "
                  f"{r['prefix']}: wall {r['median_ms']:.1f} ms, \"layer\" scopes {r['breakdown_layer_ms']:.1f} ms "
                  f"(medians of {r['reps']} profiled reps)\n")
            print("| scope | count | ms | share of layer |")
            print("|---|---|---|---|")
            for s in r["breakdown"]:
                leaf = s["scope"].rsplit(".", 1)[-1]
                indent = "&nbsp;&nbsp;" * s["depth"]
                print(f"| {indent}{leaf} | {s['count']} | {s['median_ms']:.2f} | {100 * s['share']:.1f}% |")


if __name__ == "__main__":
    main()
