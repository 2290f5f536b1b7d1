#!/usr/bin/env python3
"""Build small DSA (glm_moe_dsa / deepseek_v32) variant fixtures with Hugging Face transformers (CPU, fp32 reference).

usage: /root/venv-fx/bin/python tools/make_dsa_variants.py [OUTDIR]   (OUTDIR defaults to tests/data next to this file)

Writes OUTDIR/variants_dsa/<name>/{config.json, model.safetensors | model-*.safetensors + model.safetensors.index.json,
reference.safetensors, reference.json}, then reloads every variant from disk with transformers (fp32) and checks it
reproduces the stored logits. Made with torch 2.11.0 and transformers 5.17.0. Deterministic: single-threaded, fixed
seeds. Approach as tools/make_variant_fixtures.py (itself after ../shared/tools/make_fixtures.py):
  * linear weights ~ N(0, 0.5/sqrt(fan_in)); RMSNorm and the indexer LayerNorm weights ~ U(0.5, 1.5); the LayerNorm
    bias and the e_score_correction_bias buffer ~ N(0, 0.1) (make_fixtures.py leaves both at zero); all of them
    rounded to bf16 before the reference is computed (the checkpoint is bf16);
  * prompts are 1, 9, 70, 130 tokens (index_topk 8 / 12 / 24, so most rows are really sparse);
  * config.json may be rewritten after saving (indexer_types removed in favour of index_topk_freq / a pattern,
    mlp_layer_types removed in favour of first_k_dense_replace); transformers must read it back to the same layer
    types, which is checked.
"""
import json, math, os, shutil, sys

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM, DeepseekV32Config, GlmMoeDsaConfig

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "data")
VAR = os.path.join(OUT, "variants_dsa")
PROMPTS = [1, 9, 70, 130]
GEN = "transformers " + transformers.__version__ + ", torch " + torch.__version__


def make_model(cfg_cls, kw, seed):
    torch.manual_seed(seed)
    cfg = cfg_cls(**kw)
    cfg._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() >= 2:  # linear weights, embeddings, router, fused experts
                p.normal_(0, 0.5 / math.sqrt(p.shape[-1]))
            elif n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            elif n.endswith("k_norm.bias"):
                p.normal_(0, 0.1)
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.normal_(0, 0.1)
        for p in model.parameters():  # the stored weights are bf16: compute the reference on exactly those values
            p.copy_(p.to(torch.bfloat16).float())
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.copy_(b.to(torch.bfloat16).float())
    return cfg, model


def reference(model, vocab, seed):
    g = torch.Generator().manual_seed(seed + 1)
    ref = {}
    for i, n in enumerate(PROMPTS):
        ids = torch.randint(0, vocab, (1, n), generator=g)
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits[0].float()
        ref[f"input_ids_{i}"] = ids[0].to(torch.int64).contiguous()
        ref[f"logits_{i}"] = logits.contiguous()
    return ref


def dir_size(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def build(name, cfg_cls, kw, seed, what, shard=None, drop=(), add=None):
    cfg, model = make_model(cfg_cls, kw, seed)
    ref = reference(model, cfg.vocab_size, seed)
    d = os.path.join(VAR, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    save_file(ref, os.path.join(d, "reference.safetensors"))
    model.to(torch.bfloat16).save_pretrained(d, **({"max_shard_size": shard} if shard else {}))
    p = os.path.join(d, "config.json")
    c = json.load(open(p))
    for k in drop:
        c.pop(k, None)
    c.update(add or {})
    json.dump(c, open(p, "w"), indent=2, sort_keys=True)
    back = AutoConfig.from_pretrained(d)  # the rewritten file must mean the same model
    for k in ("indexer_types", "mlp_layer_types"):
        assert getattr(back, k, None) == getattr(cfg, k, None), (name, k, getattr(back, k, None), getattr(cfg, k, None))
    n_files = len([f for f in os.listdir(d) if f.startswith("model") and f.endswith(".safetensors")])
    meta = {"name": name, "generator": GEN, "model_type": cfg.model_type, "exercises": what,
            "reference_compute": "float32, CPU, eager attention, full forward per prompt (use_cache=False), on "
                                 "exactly the stored bf16 weight values",
            "prompts": PROMPTS, "seed": seed, "n_weight_files": n_files,
            "indexer_types": getattr(cfg, "indexer_types", None), "mlp_layer_types": cfg.mlp_layer_types,
            "config_rewrite": {"dropped": list(drop), "added": add or {}}}
    json.dump(meta, open(os.path.join(d, "reference.json"), "w"), indent=1)
    return d


def check(d):
    ref = load_file(os.path.join(d, "reference.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    worst, argmax_ok = 0.0, True
    for i in range(len(PROMPTS)):
        with torch.no_grad():
            lg = model(input_ids=ref[f"input_ids_{i}"][None], use_cache=False).logits[0]
        worst = max(worst, (lg - ref[f"logits_{i}"]).abs().max().item())
        argmax_ok &= bool((lg.argmax(-1) == ref[f"logits_{i}"].argmax(-1)).all())
    return worst, argmax_ok


BASE = dict(vocab_size=128, hidden_size=48, intermediate_size=64, moe_intermediate_size=16, n_shared_experts=1,
            n_routed_experts=8, routed_scaling_factor=2.5, kv_lora_rank=32, q_lora_rank=40, qk_nope_head_dim=16,
            qk_rope_head_dim=8, v_head_dim=24, num_experts_per_tok=2, norm_topk_prob=True,
            max_position_embeddings=512, tie_word_embeddings=False)

# GLM: 3 heads, index_topk 8, 3 index heads x 16, 6 layers whose indexer_types come from index_topk_freq 2 /
# index_skip_topk_offset 1 (F S F S F S), sharded into many files.
GLM_FREQ = dict(BASE, num_hidden_layers=6, num_attention_heads=3, num_key_value_heads=3, n_group=1, topk_group=1,
                first_k_dense_replace=1, index_topk=8, index_n_heads=3, index_head_dim=16, rms_norm_eps=1e-5,
                index_topk_freq=2, index_skip_topk_offset=1,
                rope_parameters={"rope_type": "default", "rope_theta": 50000.0})

# GLM: index_topk_pattern string "FFSFSS" (no indexer_types), index_topk 24 (prompt 70 and 130 sparse, 9 dense),
# 5 heads, 2 index heads x 32 (rope 8 of 32), mlp_layer_types absent (first_k_dense_replace 2).
GLM_PATTERN = dict(BASE, num_hidden_layers=6, num_attention_heads=5, num_key_value_heads=5, n_group=1, topk_group=1,
                   first_k_dense_replace=2, index_topk=24, index_n_heads=2, index_head_dim=32, rms_norm_eps=1e-5,
                   index_topk_pattern="FFSFSS", rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})

# DeepSeek-V3.2: YaRN (factor 4, original 64, mscale 1 / mscale_all_dim 0.8), half-split indexer RoPE (the V3.2
# default), 16 experts with n_group 4 / topk_group 2, top-3, norm_topk_prob false, 4 heads, index_topk 12, 4 index
# heads x 16, rms_norm_eps 1e-6, first 2 of 4 layers dense, mlp_layer_types absent.
V32_YARN = dict(BASE, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=16,
                n_group=4, topk_group=2, num_experts_per_tok=3, norm_topk_prob=False, routed_scaling_factor=1.5,
                first_k_dense_replace=2, index_topk=12, index_n_heads=4, index_head_dim=16, rms_norm_eps=1e-6,
                max_position_embeddings=256,
                rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                 "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
                                 "mscale": 1.0, "mscale_all_dim": 0.8})

WHAT = {
    "glm_h3_freq_topk8_sharded": "glm_moe_dsa, hidden 48, vocab 128, 3 heads, q_lora 40, kv_lora 32, nope 16, rope 8, v 24; index_topk 8, "
                                 "3 index heads x 16; indexer_types from index_topk_freq 2 / index_skip_topk_offset 1 "
                                 "(F S F S F S; no indexer_types key); first layer dense; default RoPE theta 5e4; "
                                 "sharded over many files",
    "glm_pattern_topk24": "glm_moe_dsa, 5 heads; index_topk 24, 2 index heads x 32; index_topk_pattern 'FFSFSS' (no "
                          "indexer_types key); no mlp_layer_types key (first_k_dense_replace 2); RoPE theta 1e6",
    "v32_yarn_groups": "deepseek_v32, 4 heads; YaRN factor 4 / original 64 / mscale 1 / mscale_all_dim 0.8; half-split "
                       "indexer RoPE; index_topk 12, 4 index heads x 16; 16 experts n_group 4 / topk_group 2 top-3, "
                       "norm_topk_prob false, routed_scaling 1.5; first 2 of 4 layers dense (no mlp_layer_types key)",
}


def main():
    os.makedirs(VAR, exist_ok=True)
    built = []
    built.append(build("glm_h3_freq_topk8_sharded", GlmMoeDsaConfig, GLM_FREQ, 201, WHAT["glm_h3_freq_topk8_sharded"],
                       shard="20KB", drop=("indexer_types",)))
    built.append(build("glm_pattern_topk24", GlmMoeDsaConfig, GLM_PATTERN, 202, WHAT["glm_pattern_topk24"],
                       drop=("indexer_types", "mlp_layer_types")))
    built.append(build("v32_yarn_groups", DeepseekV32Config, V32_YARN, 203, WHAT["v32_yarn_groups"],
                       drop=("mlp_layer_types",)))
    ok = True
    for d in built:
        worst, am = check(d)
        print(f"  {os.path.basename(d):28s} max|dlogit| {worst:.3e}  argmax {'ok' if am else 'DIFFERS'}  "
              f"{dir_size(d) / 1024:7.1f} KiB")
        ok &= worst < 1e-4 and am and dir_size(d) < 1024 * 1024
    if not ok:
        sys.exit("sanity check FAILED")


if __name__ == "__main__":
    main()
