"""Writes an FP8 copy of a tiny Hugging Face checkpoint as tests/models/fp8_weights_test.cc's write_fp8_copy does:
every 2-D `.weight` except embeddings, lm_head, norms and the MoE router quantised per 128 x 128 block (scale =
amax / 448, e4m3 = torch's cast of weight / scale, `X.weight_scale_inv` = scale), and quantization_config (fp8, block
[128, 128]) added to config.json. Run on the GPU machine (torch, safetensors).
  python3 fp8_copy.py SRC_DIR DST_DIR"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file

src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
tensors = load_file(os.path.join(src, "model.safetensors"))
out = {}
for name, t in tensors.items():
    quantise = (t.dim() == 2 and name.endswith(".weight") and "embed_tokens" not in name and "lm_head" not in name
                and "norm" not in name and not name.endswith("mlp.gate.weight"))
    if not quantise:
        out[name] = t
        continue
    w = t.float()
    n, k = w.shape
    nb, kb = (n + 127) // 128, (k + 127) // 128
    pad = torch.zeros(nb * 128, kb * 128)
    pad[:n, :k] = w.abs()
    amax = pad.view(nb, 128, kb, 128).amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    full = scale.repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
    out[name] = (w / full).to(torch.float8_e4m3fn)
    out[name + "_scale_inv"] = scale.contiguous()
save_file(out, os.path.join(dst, "model.safetensors"))
config = json.load(open(os.path.join(src, "config.json")))
config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                 "weight_block_size": [128, 128]}
json.dump(config, open(os.path.join(dst, "config.json"), "w"), indent=1)
print(f"{src} -> {dst}: {sum(1 for k in out if k.endswith('_scale_inv'))} FP8 weights")
