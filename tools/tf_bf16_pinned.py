#!/usr/bin/env python3
"""transformers 5.17 in bf16 (CPU, eager) on the decisions Penstock recorded in fp32: the bf16 oracle that the pinned
Penstock bf16 run (tools/gpu_pinned_check.py) is judged beside.

usage: /root/venv-fx/bin/python tools/tf_bf16_pinned.py PINDIR OUT.md MODEL_DIR ...
  PINDIR/<model>/prompt<K>.safetensors from `gpu_pinned_check.py record`. Every MoE router's top-k indices are replaced
  by the recorded ids (weights from the router's own fp32 sigmoid scores at them, renormalised and scaled as the
  router does), and every DSA indexer row that sees more than index_topk keys by the recorded key positions. Reports per
  prompt: max |diff| vs the fixture reference (transformers fp32), positions over 0.05, argmax mismatches (near-ties:
  reference top-2 gap <= the case's max |diff|), and the decisions transformers' bf16 would have made differently.
FP8 checkpoints and K3 (no transformers model) are skipped."""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import load_file

torch.set_num_threads(max(1, os.cpu_count() or 1))
transformers.logging.set_verbosity_error()
TOL = 5e-2
DTYPE = getattr(torch, os.environ.get("DTYPE", "bfloat16"))  # float32: a check of the pinning itself
# With DTYPE=float32, ROUND lists bf16 rounding points to inject into the fp32 model (attribution of the bf16 error):
# weights (every Linear weight), linear_in (every Linear's input: a bf16 GEMM's operands), normed (RMSNorm outputs),
# stream (each decoder layer's output hidden states). Empty: none (the pinning check).
ROUND = [p for p in os.environ.get("ROUND", "").split(",") if p]


def bf16(x):
    return x.to(torch.bfloat16).to(x.dtype)


def inject_rounding(model):
    only = os.environ.get("ROUND_ONLY")  # a substring of the module path, e.g. "mlp" or "self_attn"
    for path, mod in model.named_modules():
        if only and only not in path:
            continue
        name = type(mod).__name__
        if isinstance(mod, torch.nn.Linear):
            if "weights" in ROUND:
                with torch.no_grad():
                    mod.weight.copy_(bf16(mod.weight))
            if "linear_in" in ROUND:
                mod.register_forward_pre_hook(lambda m, a: (bf16(a[0]),) + tuple(a[1:]))
        elif "normed" in ROUND and name.endswith("RMSNorm") and "Gated" not in name:
            mod.register_forward_hook(lambda m, a, out: bf16(out) if torch.is_tensor(out) else out)
    if "stream" in ROUND:
        for layer in model.model.layers:
            layer.register_forward_hook(
                lambda m, a, out: bf16(out) if torch.is_tensor(out) else (bf16(out[0]),) + tuple(out[1:]))


def pins_of(path):
    """{"moe": {(layer, pos): ids}, "dsa": {...}} of request 0."""
    t = load_file(path)
    out = {"moe": {}, "dsa": {}}
    for kind in out:
        if f"{kind}.keys" in t:
            for key, ids in zip(t[f"{kind}.keys"].tolist(), t[f"{kind}.ids"]):
                out[kind][(key[0], key[2])] = ids.long()
    return out


class Pinning:
    def __init__(self):
        self.pins = None
        self.flips = {"moe": [0, 0], "dsa": [0, 0]}


def patch(model, state):
    for layer_idx, layer in enumerate(model.model.layers):
        gate = getattr(getattr(layer, "mlp", None), "gate", None)
        if gate is not None and hasattr(gate, "e_score_correction_bias"):
            orig = gate.forward

            def router(hidden_states, _orig=orig, _gate=gate, _l=layer_idx):
                logits, weights, idx = _orig(hidden_states)
                pinned = torch.stack([state.pins["moe"][(_l, t)] for t in range(idx.shape[0])])
                for t in range(idx.shape[0]):
                    state.flips["moe"][1] += 1
                    state.flips["moe"][0] += set(idx[t].tolist()) != set(pinned[t].tolist())
                w = logits.sigmoid().gather(1, pinned)
                if _gate.norm_topk_prob:
                    w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
                return logits, w * _gate.routed_scaling_factor, pinned

            gate.forward = router
        indexer = getattr(getattr(layer, "self_attn", None), "indexer", None)
        if indexer is not None:
            orig = indexer.forward

            def select(*args, _orig=orig, _ix=indexer, _l=layer_idx, **kwargs):
                idx = _orig(*args, **kwargs).clone()  # [1, S, topk]
                k = idx.shape[-1]
                for s in range(idx.shape[1]):
                    if s + 1 <= _ix.index_topk:
                        continue
                    pinned = state.pins["dsa"][(_l, s)]
                    state.flips["dsa"][1] += 1
                    state.flips["dsa"][0] += set(idx[0, s].tolist()) != set(pinned.tolist())
                    idx[0, s] = pinned[:k].to(idx.dtype)
                return idx

            indexer.forward = select


def main():
    pindir, out_md, models = sys.argv[1], sys.argv[2], sys.argv[3:]
    rows = []
    for model_dir in models:
        name = os.path.basename(model_dir.rstrip("/"))
        config = json.load(open(os.path.join(model_dir, "config.json")))
        if "quantization_config" in config or "attn_res_block_size" in config:
            print(f"{name}: skipped (FP8 checkpoint or K3)")
            continue
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPE,
                                                                  attn_implementation="eager").eval()
        state = Pinning()
        patch(model, state)
        if ROUND:
            inject_rounding(model)
        ref = load_file(os.path.join(model_dir, "reference.safetensors"))
        k = 0
        while f"input_ids_{k}" in ref:
            ids = ref[f"input_ids_{k}"].long()
            want = ref[f"logits_{k}"].float()
            state.pins = pins_of(os.path.join(pindir, name, f"prompt{k}.safetensors"))
            state.flips = {"moe": [0, 0], "dsa": [0, 0]}
            with torch.no_grad():
                got = model(ids[None]).logits[0].float()
            d = (got - want).abs().amax(-1)
            worst = d.max().item()
            mism = got.argmax(-1) != want.argmax(-1)
            top2 = want.topk(2, dim=-1).values
            gap = top2[:, 0] - top2[:, 1]
            near = int((mism & (gap <= worst)).sum())
            rows.append((name, k, len(ids), worst, int((d > TOL).sum()), int(mism.sum()), near,
                         state.flips["moe"], state.flips["dsa"]))
            print(rows[-1])
            k += 1
    with open(out_md, "w") as f:
        f.write(f"transformers {transformers.__version__}, torch {torch.__version__}, {DTYPE}, CPU eager, decisions pinned "
                f"to Penstock's fp32 recording\n\n| model | prompt | tokens | max abs diff | positions > {TOL} | "
                f"argmax mismatches (near-ties) | moe flips / decisions | dsa flips / decisions |\n"
                f"|---|---|---|---|---|---|---|---|\n")
        for name, k, n, worst, over, mism, near, fm, fd in rows:
            f.write(f"| {name} | {k} | {n} | {worst:.3e} | {over}/{n} | {mism} ({near}) | {fm[0]}/{fm[1]} | "
                    f"{fd[0]}/{fd[1]} |\n")


if __name__ == "__main__":
    main()
