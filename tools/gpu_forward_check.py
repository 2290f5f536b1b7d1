#!/usr/bin/env python3
"""Runs `penstock forward --backend cuda` over fixture checkpoints, prompts, chunk sizes and MLA forms, and compares
every position's logits with the reference (max |diff|, argmax mismatches outside reference near-ties).
usage: gpu_forward_check.py PENSTOCK OUTDIR MODEL_DIR[:chunks] ...   (chunks: comma list, 0 = whole prompt)
Writes OUTDIR/forward_check_<dtype>.md (DTYPE=float32|bfloat16, TOL overrides the bound) and exits non-zero when a case exceeds the tolerance."""
import os, subprocess, sys, time
import torch
from safetensors.torch import load_file

DTYPE = os.environ.get("DTYPE", "float32")
TOL = float(os.environ.get("TOL", "2e-3" if DTYPE == "float32" else "5e-2"))  # issue #6: fp32 2e-3, bf16 0.05
MARGIN = float(os.environ.get("MARGIN", "2e-3"))  # argmax compared where the reference top-2 gap exceeds this
binary, outdir = sys.argv[1], sys.argv[2]
os.makedirs(outdir, exist_ok=True)
rows, worst, failures = [], 0.0, 0
t_start = time.time()
for spec in sys.argv[3:]:
    model, _, chunks = spec.partition(":")
    chunks = [int(c) for c in (chunks or "0,1,17,64").split(",")]
    ref = load_file(os.path.join(model, "reference.safetensors"))
    k = 0
    while f"input_ids_{k}" in ref:
        ids = ref[f"input_ids_{k}"].tolist()
        want = ref[f"logits_{k}"].float()
        top2 = want.topk(2, dim=-1).values
        decisive = (top2[:, 0] - top2[:, 1]) > MARGIN
        for chunk in chunks:
            for form in ("mha", "absorbed"):
                out = os.path.join(outdir, "logits.safetensors")
                cmd = [binary, "forward", "--model", model, "--input-ids", ",".join(map(str, ids)), "--backend",
                       "cuda", "--dtype", DTYPE, "--chunk-size", str(chunk), "--mla-form", form, "--out", out]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    failures += 1
                    rows.append((os.path.basename(model), k, len(ids), chunk, form, "ERROR", r.stderr.strip()[-200:]))
                    continue
                got = load_file(out)["logits"].float()
                diff = (got - want).abs().max().item()
                mism = int(((got.argmax(-1) != want.argmax(-1)) & decisive).sum().item())
                worst = max(worst, diff)
                ok = diff <= TOL and mism == 0
                failures += 0 if ok else 1
                rows.append((os.path.basename(model), k, len(ids), chunk, form, f"{diff:.2e}", f"{mism}"))
        k += 1
report = os.path.join(outdir, f"forward_check_{DTYPE}.md")
with open(report, "w") as f:
    f.write(f"dtype {DTYPE}, tolerance {TOL}, argmax margin {MARGIN}; {len(rows)} cases, {failures} failing, worst max|diff| "
            f"{worst:.3e}, {time.time() - t_start:.0f} s\n\n")
    f.write("| model | prompt | tokens | chunk | form | max abs diff | argmax mismatches |\n|---|---|---|---|---|---|---|\n")
    for r in rows:
        f.write("| " + " | ".join(map(str, r)) + " |\n")
print(open(report).read()[:1500])
print(f"SUMMARY: {len(rows)} cases, {failures} failing, worst {worst:.3e}")
sys.exit(1 if failures else 0)
