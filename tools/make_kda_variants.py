#!/usr/bin/env python3
"""Build kimi_linear variant fixtures with Hugging Face transformers (CPU, fp32 reference) for the KDA tests.

usage: /root/venv-fx/bin/python tools/make_kda_variants.py [OUTDIR]   (OUTDIR defaults to tests/data next to this file)

Writes OUTDIR/variants_kda/<name>/{config.json, model.safetensors | model-*.safetensors + index, reference.safetensors,
reference.json}, then reloads every variant from disk with transformers (fp32) and checks that it reproduces the stored
logits. Made with torch 2.11.0 and transformers 5.17.0. Deterministic: single-threaded, fixed seeds.

Same approach as tools/make_variant_fixtures.py: weights normal(0, 0.5/sqrt(fan_in)), the e_score_correction_bias
buffer really randomised, every RMSNorm weight (input/post/final, kv_a_layernorm, q_a_layernorm, the KDA o_norm)
uniform(0.5, 1.5), A_log / dt_bias from the model's own (FLA-style) initialisation, all bf16-rounded before the
reference is computed; prompts of 1, 9, 70, 130 tokens (70 and 130 cross the KDA chunk of 64).
Variants:
  kda_h3_qlora_layers: 3 KDA heads x 16, 3 MLA heads with q_lora (q_a_proj / q_a_layernorm / q_b_proj), MLA at
      layers 3 and 5 (the last), given only as linear_attn_config.kda_layers / full_attn_layers (1-based; layer_types
      and mlp_layer_types removed from config.json, so first_k_dense_replace = 2 decides the dense layers),
      6 experts top-3 in 2 groups (topk_group 1), 2 shared experts.
  kda_conv3_sharded: short conv kernel 3, 2 KDA heads x 32, MLA first and last (layer_types list), a dense layer
      after a sparse one (mlp_layer_types), checkpoint in several shards with an index.
"""
import json, math, os, shutil, sys

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM, KimiLinearConfig, KimiLinearForCausalLM

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "data")
VAR = os.path.join(OUT, "variants_kda")
PROMPTS = [1, 9, 70, 130]
GEN = "transformers " + transformers.__version__ + ", torch " + torch.__version__


def make_model(kw, seed):
    torch.manual_seed(seed)
    cfg = KimiLinearConfig(**kw)
    cfg._attn_implementation = "eager"
    model = KimiLinearForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("A_log") or n.endswith("dt_bias"):
                continue  # keep the FLA-style init (decay rates in [1, 16], dt in [1e-3, 1e-1])
            if p.dim() >= 2:  # linear weights, conv weights, fused expert tensors, embeddings, router
                p.normal_(0, 0.5 / math.sqrt(p.shape[-1]))
            elif n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.normal_(0, 0.1)
        for p in model.parameters():
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


def build(name, kw, seed, what, shard=None, drop_keys=()):
    cfg, model = make_model(kw, seed)
    ref = reference(model, cfg.vocab_size, seed)
    d = os.path.join(VAR, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    save_file(ref, os.path.join(d, "reference.safetensors"))
    model.to(torch.bfloat16).save_pretrained(d, **({"max_shard_size": shard} if shard else {}))
    if drop_keys:
        p = os.path.join(d, "config.json")
        c = json.load(open(p))
        for k in drop_keys:
            c.pop(k)
        json.dump(c, open(p, "w"), indent=2, sort_keys=True)
        back = AutoConfig.from_pretrained(d)
        assert back.layer_types == cfg.layer_types, (back.layer_types, cfg.layer_types)
        assert back.mlp_layer_types == cfg.mlp_layer_types, (back.mlp_layer_types, cfg.mlp_layer_types)
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors") and f.startswith("model"))
    keys = sorted(k for f in files for k in load_file(os.path.join(d, f)).keys())
    meta = {"name": name, "generator": GEN, "model_type": "kimi_linear", "exercises": what,
            "reference_compute": "float32, CPU, eager attention, full forward per prompt (use_cache=False), on exactly "
                                 "the stored bf16 weight values",
            "layer_types": cfg.layer_types, "mlp_layer_types": cfg.mlp_layer_types,
            "prompts": PROMPTS, "seed": seed, "n_tensors": len(keys), "n_files": len(files),
            "sample_keys": [k for k in keys if "layers.0." in k or "layers." not in k][:60]}
    json.dump(meta, open(os.path.join(d, "reference.json"), "w"), indent=1)
    return d


def check(d):
    ref = load_file(os.path.join(d, "reference.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    worst = 0.0
    for i in range(len(PROMPTS)):
        with torch.no_grad():
            lg = model(input_ids=ref[f"input_ids_{i}"][None], use_cache=False).logits[0]
        worst = max(worst, (lg - ref[f"logits_{i}"]).abs().max().item())
    return worst


COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, kv_lora_rank=32,
              qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=24, rms_norm_eps=1e-5, routed_scaling_factor=2.446,
              tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)

VARIANTS = [
    ("kda_h3_qlora_layers", dict(COMMON, num_hidden_layers=5, num_attention_heads=3, num_key_value_heads=3,
                                 q_lora_rank=24, num_experts=6, num_experts_per_token=3, num_expert_group=2,
                                 topk_group=1, num_shared_experts=2, first_k_dense_replace=2,
                                 linear_attn_config={"head_dim": 16, "num_heads": 3, "short_conv_kernel_size": 4,
                                                     "kda_layers": [1, 2, 4], "full_attn_layers": [3, 5]}),
     31, "3 KDA heads, q_lora MLA with 3 heads, MLA layers from linear_attn_config (1-based), grouped routing, "
         "2 shared experts, 2 dense layers from first_k_dense_replace", None,
     ("layer_types", "mlp_layer_types")),
    ("kda_conv3_sharded", dict(COMMON, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=2,
                               q_lora_rank=None, kv_lora_rank=16, num_experts=4, num_experts_per_token=2,
                               num_expert_group=1, topk_group=1, num_shared_experts=1,
                               layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention"],
                               mlp_layer_types=["sparse", "dense", "sparse", "dense"],
                               linear_attn_config={"head_dim": 32, "num_heads": 2, "short_conv_kernel_size": 3}),
     37, "conv kernel 3, MLA first and last, dense layer after a sparse one, sharded checkpoint", "120KB", ()),
]


def main():
    os.makedirs(VAR, exist_ok=True)
    for name, kw, seed, what, shard, drop in VARIANTS:
        d = build(name, kw, seed, what, shard, drop)
        worst = check(d)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"{name}: reload max |diff| {worst:.3g}, {size / 1024:.0f} KiB")
        assert worst == 0.0 or worst < 1e-5, worst
        assert size < 1 << 20, size


if __name__ == "__main__":
    main()
