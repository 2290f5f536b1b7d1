#!/usr/bin/env python3
"""Build "held-back-style" deepseek_v3 variant fixtures with Hugging Face transformers (CPU, fp32 reference)
and the e4m3 conversion table used by the FP8 tests.

usage: python3 tools/make_variant_fixtures.py [OUTDIR]      (OUTDIR defaults to tests/data next to this file)

Writes OUTDIR/variants/<name>/{config.json, model.safetensors | model-*.safetensors + model.safetensors.index.json,
reference.safetensors, reference.json} and OUTDIR/e4m3_torch_bf16.bin, then reloads every variant from disk with
transformers (fp32) and checks it reproduces the stored logits. Needs torch and transformers (made with
torch 2.11.0 and transformers 5.17.0; accelerate is needed only for the informational FP8 from_pretrained probe).
Deterministic: single-threaded, fixed seeds.

Approach follows ../shared/tools/make_fixtures.py, with these differences (all deliberate):
  * the e_score_correction_bias *buffer* is really randomised (make_fixtures.py only walks named_parameters(),
    so its bias stays all-zero) and bf16-rounded before the reference is computed;
  * RMSNorm weights are randomised to uniform(0.5, 1.5) (not all ones), so a norm whose weight is not applied
    cannot pass;
  * prompts are 1, 9, 70, 130 tokens.
"""
import json, math, os, shutil, sys, tempfile

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "data")
VAR = os.path.join(OUT, "variants")
PROMPTS = [1, 9, 70, 130]
GEN = "transformers " + transformers.__version__ + ", torch " + torch.__version__
BLOCK = 128  # FP8 weight block (DeepSeek-V3)


# ----------------------------------------------------------------------------------------------------------------
def make_model(kw, seed):
    torch.manual_seed(seed)
    cfg = DeepseekV3Config(**kw)
    cfg._attn_implementation = "eager"
    model = DeepseekV3ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() >= 2:  # linear weights, fused 3-D expert tensors, embeddings, router
                p.normal_(0, 0.5 / math.sqrt(p.shape[-1]))
            elif n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.normal_(0, 0.1)
    return cfg, model


def round_bf16(model, keep_bias_fp32=False):
    """The stored weights are bf16: compute the reference on exactly those values."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
        if not keep_bias_fp32:
            for n, b in model.named_buffers():
                if n.endswith("e_score_correction_bias"):
                    b.copy_(b.to(torch.bfloat16).float())


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


def stored_tensors(d):
    """name -> (dtype, shape, file) for every tensor of the checkpoint in folder d."""
    out = {}
    files = sorted(f for f in os.listdir(d) if f.startswith("model") and f.endswith(".safetensors"))
    for fn in files:
        with safe_open(os.path.join(d, fn), "pt") as f:
            for k in f.keys():
                sl = f.get_slice(k)
                out[k] = (str(sl.get_dtype()), list(sl.get_shape()), fn)
    return out


def write_meta(d, name, cfg, seed, what, extra=None):
    t = stored_tensors(d)
    dtypes = {}
    for k, (dt, _, _) in t.items():
        dtypes[dt] = dtypes.get(dt, 0) + 1
    meta = {"name": name, "generator": GEN, "model_type": cfg.model_type, "exercises": what,
            "reference_compute": "float32, CPU, eager attention, full forward per prompt (use_cache=False), "
                                 "on exactly the stored weight values (dequantised for FP8)",
            "prompts": PROMPTS, "seed": seed, "n_tensors": len(t), "n_files": len({v[2] for v in t.values()}),
            "tensor_dtypes": dtypes,
            "sample_keys": sorted(k for k in t if ".0." in k or "layers.1." in k or "layers." not in k)[:80]}
    if extra:
        meta.update(extra)
    json.dump(meta, open(os.path.join(d, "reference.json"), "w"), indent=1)


def fresh_dir(name):
    d = os.path.join(VAR, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    return d


# ----------------------------------------------------------------------------------------------------------------
def build_bf16(name, kw, seed, what, shard=None, legacy=None):
    cfg, model = make_model(kw, seed)
    round_bf16(model)
    ref = reference(model, cfg.vocab_size, seed)
    d = fresh_dir(name)
    save_file(ref, os.path.join(d, "reference.safetensors"))
    model.to(torch.bfloat16).save_pretrained(d, **({"max_shard_size": shard} if shard else {}))
    extra = {}
    if legacy is not None:
        extra = rewrite_legacy(d, cfg, legacy)
    write_meta(d, name, cfg, seed, what, extra)
    return d


def rewrite_legacy(d, cfg, legacy):
    """Rewrite config.json into the original DeepSeek-V3 / transformers-4 layout: top-level rope_theta and a
    rope_scaling dict with "type", no rope_parameters / head_dim / qk_head_dim / rope_interleave keys, plus the
    DeepSeek routing keys that real checkpoints carry (ignored by transformers)."""
    p = os.path.join(d, "config.json")
    c = json.load(open(p))
    rp = c.pop("rope_parameters")
    for k in ("head_dim", "qk_head_dim", "rope_interleave"):
        c.pop(k, None)
    c["rope_theta"] = rp["rope_theta"]
    c["rope_scaling"] = legacy["rope_scaling"]
    c.update(legacy.get("extra_keys", {}))
    json.dump(c, open(p, "w"), indent=2, sort_keys=True)
    # the legacy file must be read back to the same effective RoPE parameters
    back = AutoConfig.from_pretrained(d)
    want = dict(cfg.rope_parameters)
    got = dict(back.rope_parameters)
    for k, v in want.items():
        assert got.get(k) == v, ("legacy rope mismatch", k, v, got.get(k))
    assert back.rope_interleave == cfg.rope_interleave and back.head_dim == cfg.head_dim
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding, yarn_apply_mscale
    r0, r1 = DeepseekV3RotaryEmbedding(cfg), DeepseekV3RotaryEmbedding(back)
    assert torch.equal(r0.inv_freq, r1.inv_freq) and r0.attention_scaling == r1.attention_scaling
    s0 = yarn_apply_mscale(cfg.rope_parameters, cfg.qk_head_dim ** -0.5)
    s1 = yarn_apply_mscale(back.rope_parameters, back.qk_head_dim ** -0.5)
    assert s0 == s1
    print(f"  legacy config read back as rope_parameters={got}")
    return {"legacy_config": "config.json rewritten to legacy fields after saving; AutoConfig reads it back to "
                             "rope_parameters " + json.dumps(got, sort_keys=True)}


# ----------------------------------------------------------------------------------------------------------------
def quantize_block_fp8(w):
    """DeepSeek-style 128x128 block FP8: returns (q float8_e4m3fn [o,i], scale_inv float32 [ceil(o/128), ceil(i/128)])
    with w ~= q.float() * scale_inv (per block); scale = amax(block) / 448."""
    o, i = w.shape
    bo, bi = -(-o // BLOCK), -(-i // BLOCK)
    w = w.float()
    scale = torch.empty(bo, bi, dtype=torch.float32)
    q = torch.empty(o, i, dtype=torch.float8_e4m3fn)
    for r in range(bo):
        for c in range(bi):
            blk = w[r * BLOCK:(r + 1) * BLOCK, c * BLOCK:(c + 1) * BLOCK]
            s = blk.abs().max() / 448.0
            s = s if s > 0 else torch.tensor(1.0)
            scale[r, c] = s
            q[r * BLOCK:(r + 1) * BLOCK, c * BLOCK:(c + 1) * BLOCK] = (blk / s).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, scale


def dequant_block_fp8(q, scale_inv):
    """Independent dequantiser (used for the reference and the check): expand the scale grid to 128x128 blocks and
    crop the partial edge blocks."""
    o, i = q.shape
    s = scale_inv.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:o, :i]
    return q.float() * s


def fp8_eligible(k, shape):
    return (k.startswith("model.layers.") and k.endswith(".weight") and len(shape) == 2
            and not k.endswith("mlp.gate.weight"))


def build_fp8(name, kw, seed, what):
    cfg, model = make_model(kw, seed)
    round_bf16(model, keep_bias_fp32=True)
    bias = {n: b.detach().clone().float() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")}
    tmp = tempfile.mkdtemp()
    try:
        # 1. checkpoint layout (per-expert keys) as transformers writes it, in bf16 -- the pre-quantisation values
        model.to(torch.bfloat16).save_pretrained(tmp)
        sd = load_file(os.path.join(tmp, "model.safetensors"))
        c = json.load(open(os.path.join(tmp, "config.json")))
        out, deq = {}, {}
        n_q, partial = 0, []
        for k, t in sd.items():
            if k in bias:  # DeepSeek keeps the routing bias in float32
                out[k] = bias[k]
                deq[k] = bias[k]
            elif fp8_eligible(k, t.shape):
                q, s = quantize_block_fp8(t.float())
                out[k] = q
                out[k + "_scale_inv"] = s
                deq[k] = dequant_block_fp8(q, s)
                n_q += 1
                if t.shape[0] % BLOCK or t.shape[1] % BLOCK:
                    partial.append(k)
            else:
                out[k] = t
                deq[k] = t.float()
        # 2. reference model: fp32 model loaded with the dequantised weights (no quantization_config)
        save_file({k: v.contiguous() for k, v in deq.items()}, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        ref_model = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager").eval()
        ref = reference(ref_model, cfg.vocab_size, seed)
        # how much the quantisation moves the logits (so that a wrong dequantisation cannot pass)
        with torch.no_grad():
            model.float()
            for n, b in model.named_buffers():
                if n in bias:
                    b.copy_(bias[n])
            shift = max((model(input_ids=ref[f"input_ids_{i}"][None], use_cache=False).logits[0] - ref[f"logits_{i}"]).abs().max().item()
                        for i in range(len(PROMPTS)))
    finally:
        shutil.rmtree(tmp)
    d = fresh_dir(name)
    save_file(ref, os.path.join(d, "reference.safetensors"))
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    c["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                "weight_block_size": [BLOCK, BLOCK]}
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2, sort_keys=True)
    write_meta(d, name, cfg, seed, what, {
        "weights": f"fp8 e4m3fn with float32 weight_scale_inv per {BLOCK}x{BLOCK} block for {n_q} linear weights "
                   "(scale = amax/448, a multiplier); router gate, norms, embed, lm_head bf16; "
                   "e_score_correction_bias float32",
        "partial_edge_block_weights": len(partial), "partial_edge_block_examples": partial[:12],
        "max_abs_logit_shift_vs_unquantised_bf16_model": shift})
    print(f"  fp8: {n_q} quantised weights, {len(partial)} with partial edge blocks; quantisation moves logits by up to {shift:.3f}")
    return d


# ----------------------------------------------------------------------------------------------------------------
def e4m3_table(path):
    i = torch.arange(65536, dtype=torch.int32)
    i = torch.where(i >= 32768, i - 65536, i).to(torch.int16)  # explicit two's-complement wrap, no overflow cast
    bf = i.view(torch.bfloat16)
    assert bf.view(torch.int16).to(torch.int32).bitwise_and(0xFFFF).equal(torch.arange(65536, dtype=torch.int32))
    b = bf.float().to(torch.float8_e4m3fn).view(torch.uint8)
    b.numpy().tofile(path)
    assert os.path.getsize(path) == 65536
    print(f"wrote {path}")


# ----------------------------------------------------------------------------------------------------------------
def check_variant(d, fp8=False):
    ref = load_file(os.path.join(d, "reference.safetensors"))
    if fp8:
        # the independent reload: config without quantization_config, weights dequantised by us
        cfgd = json.load(open(os.path.join(d, "config.json")))
        cfgd.pop("quantization_config")
        sd = {}
        with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
            keys = set(f.keys())
            for k in keys:
                if k.endswith("_scale_inv"):
                    continue
                t = f.get_tensor(k)
                sd[k] = dequant_block_fp8(t, f.get_tensor(k + "_scale_inv")) if k + "_scale_inv" in keys else t.float()
        tmp = tempfile.mkdtemp()
        try:
            json.dump(cfgd, open(os.path.join(tmp, "config.json"), "w"))
            save_file(sd, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
            model = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager").eval()
        finally:
            shutil.rmtree(tmp)
    else:
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    worst = 0.0
    argmax_ok = True
    for i in range(len(PROMPTS)):
        with torch.no_grad():
            lg = model(input_ids=ref[f"input_ids_{i}"][None], use_cache=False).logits[0]
        worst = max(worst, (lg - ref[f"logits_{i}"]).abs().max().item())
        argmax_ok &= bool((lg.argmax(-1) == ref[f"logits_{i}"].argmax(-1)).all())
    return worst, argmax_ok


def probe_fp8_from_pretrained(d):
    """Informational: what transformers' own FP8 loader (auto-dequantise on CPU) makes of this checkpoint."""
    ref = load_file(os.path.join(d, "reference.safetensors"))
    try:
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        with torch.no_grad():
            return max((model(input_ids=ref[f"input_ids_{i}"][None], use_cache=False).logits[0] - ref[f"logits_{i}"]).abs().max().item()
                       for i in range(len(PROMPTS)))
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e)[:200]}"


def dir_size(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


# ----------------------------------------------------------------------------------------------------------------
YARN_A = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
          "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}

A = dict(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
         num_attention_heads=3, num_key_value_heads=3, n_shared_experts=1, n_routed_experts=8,
         routed_scaling_factor=2.5, kv_lora_rank=32, q_lora_rank=48, qk_nope_head_dim=16, qk_rope_head_dim=16,
         v_head_dim=24, n_group=2, topk_group=1, num_experts_per_tok=2, first_k_dense_replace=1, norm_topk_prob=True,
         max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False, rope_interleave=True,
         rope_parameters=dict(YARN_A))

B = dict(A, num_attention_heads=6, num_key_value_heads=6, rope_interleave=False, rms_norm_eps=1e-5,
         rope_parameters=dict(YARN_A, mscale=1.0, mscale_all_dim=0.8))

C = dict(vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=4,
         num_attention_heads=5, num_key_value_heads=5, n_shared_experts=2, n_routed_experts=16,
         routed_scaling_factor=1.5, kv_lora_rank=32, q_lora_rank=None, qk_nope_head_dim=16, qk_rope_head_dim=8,
         v_head_dim=16, n_group=4, topk_group=2, num_experts_per_tok=3, first_k_dense_replace=2,
         norm_topk_prob=False, max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False,
         rope_interleave=True, rope_parameters={"rope_type": "default", "rope_theta": 50000.0})

D_ROPE = {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 128, "mscale": 1.0,
          "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}
D = dict(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
         num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
         routed_scaling_factor=2.5, kv_lora_rank=16, q_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
         v_head_dim=16, n_group=4, topk_group=2, num_experts_per_tok=2, first_k_dense_replace=1, norm_topk_prob=True,
         max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False, rope_interleave=True,
         rope_parameters={"rope_type": "yarn", "rope_theta": 25000.0, "factor": 2.0,
                          "original_max_position_embeddings": 128, "mscale": 1.0, "mscale_all_dim": 1.0,
                          "beta_fast": 32, "beta_slow": 1})
D_EXTRA = {"topk_method": "noaux_tc", "scoring_func": "sigmoid", "moe_layer_freq": 1, "ep_size": 1,
           "aux_loss_alpha": 0.001, "seq_aux": True}

E = dict(A, hidden_size=160, intermediate_size=144)

WHAT = {
    "dsv3_yarn_h3": "3 heads (not a power of two); q_lora 48, kv_lora 32, nope 16, rope 16, v 24 (v != nope); YaRN "
                    "factor 4, original_max 64, max_pos 256, mscale = mscale_all_dim = 0.707 (cos/sin factor 1, "
                    "softmax scale * get_mscale(4,0.707)^2); interleaved RoPE; 8 experts top-2, n_group 2 / "
                    "topk_group 1; first layer dense; randomised routing bias and norm weights",
    "dsv3_yarn_attnfactor": "as dsv3_yarn_h3 but 6 heads, mscale 1.0 / mscale_all_dim 0.8 (cos/sin scaled by "
                            "get_mscale(4,1)/get_mscale(4,0.8) != 1, softmax scale * get_mscale(4,0.8)^2), "
                            "rope_interleave false (half-split RoPE), rms_norm_eps 1e-5",
    "dsv3_groups_sharded": "5 heads, q_lora_rank null (plain q_proj, V2-Lite style), kv_lora 32, nope 16, rope 8, "
                           "v 16; 16 experts, n_group 4 / topk_group 2, top-3, 2 shared experts, first 2 of 4 layers "
                           "dense, norm_topk_prob false, routed_scaling_factor 1.5; default RoPE theta 50000; "
                           "sharded over many files with model.safetensors.index.json",
    "dsv3_legacy_rope_scaling": "legacy config.json: top-level rope_theta 25000 and rope_scaling {type: yarn, "
                                "factor 2, original_max 128, mscale = mscale_all_dim = 1}; no rope_parameters, "
                                "head_dim, qk_head_dim or rope_interleave keys (interleave defaults to true); "
                                "DeepSeek's own routing keys (topk_method, scoring_func, ...) present; 4 heads, "
                                "rope 8, n_group 4 / topk_group 2",
    "dsv3_fp8_h3": "dsv3_yarn_h3's config with hidden 160 and intermediate 144 as a DeepSeek-style FP8 checkpoint: "
                   "every 2-D linear under model.layers.* (attention, dense MLP, experts, shared experts; not the "
                   "router gate) e4m3fn + float32 weight_scale_inv per 128x128 block, with partial edge blocks "
                   "(160 = 128 + 32, 144 = 128 + 16, and weights smaller than one block); float32 "
                   "e_score_correction_bias; reference on the dequantised weights",
}


def main():
    os.makedirs(VAR, exist_ok=True)
    built = []
    print("dsv3_yarn_h3");            built.append(("dsv3_yarn_h3", build_bf16("dsv3_yarn_h3", A, 101, WHAT["dsv3_yarn_h3"]), False))
    print("dsv3_yarn_attnfactor");    built.append(("dsv3_yarn_attnfactor", build_bf16("dsv3_yarn_attnfactor", B, 102, WHAT["dsv3_yarn_attnfactor"]), False))
    print("dsv3_groups_sharded");     built.append(("dsv3_groups_sharded", build_bf16("dsv3_groups_sharded", C, 103, WHAT["dsv3_groups_sharded"], shard="40KB"), False))
    print("dsv3_legacy_rope_scaling"); built.append(("dsv3_legacy_rope_scaling", build_bf16("dsv3_legacy_rope_scaling", D, 104, WHAT["dsv3_legacy_rope_scaling"],
                                                     legacy={"rope_scaling": D_ROPE, "extra_keys": D_EXTRA}), False))
    print("dsv3_fp8_h3");             built.append(("dsv3_fp8_h3", build_fp8("dsv3_fp8_h3", E, 105, WHAT["dsv3_fp8_h3"]), True))
    e4m3_table(os.path.join(OUT, "e4m3_torch_bf16.bin"))

    print("\nsanity check: reload from disk with transformers (fp32) and compare with reference.safetensors")
    ok = True
    for name, d, fp8 in built:
        worst, am = check_variant(d, fp8)
        n_files = len([f for f in os.listdir(d) if f.endswith(".safetensors") and f.startswith("model")])
        print(f"  {name:26s} max|dlogit| {worst:.3e}  argmax {'ok' if am else 'DIFFERS'}  {dir_size(d)/1024:7.1f} KiB  "
              f"{n_files} weight file(s)")
        ok &= worst < 1e-4 and am
        if fp8:
            print(f"  {'':26s} (transformers' own FP8 from_pretrained, auto-dequantised on CPU: max|dlogit| "
                  f"{probe_fp8_from_pretrained(d)})")
    print(f"total {OUT}: {dir_size(OUT)/1024:.1f} KiB")
    if not ok:
        sys.exit("sanity check FAILED")


if __name__ == "__main__":
    main()
