#!/usr/bin/env python3
"""bf16 against the fp32 reference on the same discrete decisions (MoE experts, DSA top-k): models/decision_pins.h.

  gpu_pinned_check.py record PENSTOCK PINDIR MODEL_DIR ...
      CPU fp32: `penstock forward --record-decisions` for every reference prompt of every checkpoint, into
      PINDIR/<model>/prompt<K>.safetensors; checks the CPU logits against the fixture reference (<= 2e-3) on the way.
  gpu_pinned_check.py check PENSTOCK PINDIR OUTDIR MODEL_DIR ...
      For every checkpoint and prompt: `--backend cuda --dtype bfloat16 --pin-decisions` at each chunk size
      (CHUNKS, default 0,1,17,64) and the unpinned run with `--compare-decisions` (UNPINNED_CHUNKS, default 0):
      max |diff| against the fixture reference logits (transformers fp32), positions over the bound, argmax
      mismatches, the near-ties among them (reference top-2 gap <= the case's observed max |diff|: the observed error
      explains the flip), and the decision flips the run reports (pinned: own choices replaced; unpinned: own choices
      that differ from the recording).
  gpu_pinned_check.py depths PENSTOCK OUTROOT MODEL_DIR[:K] ...
      Where the error grows: for every depth l < num_hidden_layers, OUTROOT/<model>_L<l>/ holds the checkpoint cut
      to its first l layers (config.json lists cut; the weight files are relative symlinks, so OUTROOT must travel
      with the models) and a reference.safetensors whose prompt 0 is reference prompt K (default: the longest) with
      the CPU fp32 logits of the cut model (the CPU reference matches transformers to ~1e-5). Record and check them
      like any checkpoint: the logits error after l layers in bf16 on the same decisions.
  env: BACKEND (cuda), DTYPE (bfloat16), FORMS (mha; comma list of MLA forms), TOL (5e-2, issue #6), JOBS (8).
Writes OUTDIR/pinned_check_cases.md (every case) and OUTDIR/pinned_check_summary.md (per checkpoint and mode);
exits non-zero when a pinned case exceeds the bound or has an argmax mismatch that is no near-tie. Pure Python."""
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_forward_check import argmax, f32_rows, ids_of, read_safetensors  # noqa: E402

BACKEND = os.environ.get("BACKEND", "cuda")
DTYPE = os.environ.get("DTYPE", "bfloat16")
FORMS = os.environ.get("FORMS", "mha").split(",")
TOL = float(os.environ.get("TOL", "5e-2"))
JOBS = int(os.environ.get("JOBS", "8"))
CHUNKS = [int(c) for c in os.environ.get("CHUNKS", "0,1,17,64").split(",")]
UNPINNED_CHUNKS = [int(c) for c in os.environ.get("UNPINNED_CHUNKS", "0").split(",") if c]
DECISIONS = re.compile(r"decisions (\w+): moe (\d+) decisions, (\d+) flips; dsa (\d+) decisions, (\d+) flips")


def prompts(model):
    ref = read_safetensors(os.path.join(model, "reference.safetensors"))
    k = 0
    while f"input_ids_{k}" in ref:
        yield k, ids_of(ref[f"input_ids_{k}"]), f32_rows(ref[f"logits_{k}"])
        k += 1


def forward(binary, model, ids, out, extra, timeout=300):
    cmd = [binary, "forward", "--model", model, "--input-ids", ",".join(map(str, ids)), "--out", out] + extra
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, None, "timed out"
    if r.returncode != 0:
        return None, None, (r.stderr.strip() or r.stdout.strip())[-300:].replace("\n", " ").replace("|", "/")
    m = DECISIONS.search(r.stdout)
    flips = {"moe": (int(m.group(2)), int(m.group(3))), "dsa": (int(m.group(4)), int(m.group(5)))} if m else None
    got = f32_rows(read_safetensors(out)["logits"])
    os.remove(out)
    return got, flips, None


def compare(got, want):
    worst, over, mism, rows = 0.0, 0, [], []
    for i, (g, w) in enumerate(zip(got, want)):
        d = max(abs(a - b) for a, b in zip(g, w))
        rows.append(d)
        worst = max(worst, d)
        over += d > TOL
        if argmax(g) != argmax(w):
            top = sorted(w, reverse=True)[:2]
            mism.append(top[0] - top[1])
    near = sum(1 for gap in mism if gap <= worst)
    return {"diff": worst, "over": over, "rows": len(want), "mism": len(mism), "near": near}


def record(binary, pindir, models):
    cases = [(m, k, ids, want) for m in models for k, ids, want in prompts(m)]

    def one(case):
        model, k, ids, want = case
        d = os.path.join(pindir, os.path.basename(model))
        os.makedirs(d, exist_ok=True)
        pin = os.path.join(d, f"prompt{k}.safetensors")
        got, flips, err = forward(binary, model, ids, pin + ".logits",
                                  ["--backend", "cpu", "--dtype", "float32", "--threads", "1", "--record-decisions", pin])
        if err:
            return case, err
        r = compare(got, want)
        return case, None if r["diff"] <= 2e-3 and r["mism"] == 0 else f"cpu fp32 off the reference: {r}"

    failures = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=JOBS) as pool:
        for (model, k, ids, _), err in pool.map(one, cases):
            print(f"{os.path.basename(model)} prompt {k} ({len(ids)} tokens): {err or 'recorded'}")
            failures += err is not None
    sys.exit(1 if failures else 0)


def check(binary, pindir, outdir, models):
    os.makedirs(outdir, exist_ok=True)
    t0 = time.time()
    cases = []  # (model, k, ids, want, pinned?, chunk, form)
    for m in models:
        for k, ids, want in prompts(m):
            for form in FORMS:
                cases += [(m, k, ids, want, True, c, form) for c in CHUNKS]
                cases += [(m, k, ids, want, False, c, form) for c in UNPINNED_CHUNKS]
    cases.sort(key=lambda c: -len(c[2]) * (8 if c[5] == 1 else 1))  # longest first

    def one(case):
        model, k, ids, want, pinned, chunk, form = case
        name = os.path.basename(model)
        pin = os.path.join(pindir, name, f"prompt{k}.safetensors")
        out = os.path.join(tempfile.gettempdir(), f"pinned_{name}_{k}_{chunk}_{form}_{int(pinned)}.safetensors")
        got, flips, err = forward(binary, model, ids, out,
                                  ["--backend", BACKEND, "--dtype", DTYPE, "--chunk-size", str(chunk), "--mla-form",
                                   form, "--pin-decisions" if pinned else "--compare-decisions", pin])
        if err:
            return case, {"error": err}
        r = compare(got, want)
        r["flips"] = flips
        r["ok"] = r["diff"] <= TOL and r["mism"] == r["near"]
        return case, r

    with concurrent.futures.ThreadPoolExecutor(max_workers=JOBS) as pool:
        results = list(pool.map(one, cases))
    results.sort(key=lambda cr: (cr[0][0], cr[0][1], not cr[0][4], cr[0][5], cr[0][6]))

    def flips_text(r):
        f = r.get("flips")
        return "n/a" if not f else f"{f['moe'][1]}/{f['moe'][0]} moe, {f['dsa'][1]}/{f['dsa'][0]} dsa"

    with open(os.path.join(outdir, "pinned_check_cases.md"), "w") as f:
        f.write(f"backend {BACKEND}, dtype {DTYPE}, bound {TOL}; near-tie: reference top-2 gap <= the case's max "
                f"abs diff\n\n| model | prompt | tokens | decisions | chunk | form | max abs diff | positions over "
                f"bound | argmax mismatches (near-ties) | flips (of decisions) |\n|---|---|---|---|---|---|---|---|---|---|\n")
        for (model, k, ids, _, pinned, chunk, form), r in results:
            m = os.path.basename(model)
            mode = "pinned" if pinned else "unpinned"
            if "error" in r:
                f.write(f"| {m} | {k} | {len(ids)} | {mode} | {chunk} | {form} | ERROR | {r['error']} | | |\n")
            else:
                f.write(f"| {m} | {k} | {len(ids)} | {mode} | {chunk} | {form} | {r['diff']:.3e} | "
                        f"{r['over']}/{r['rows']} | {r['mism']} ({r['near']}) | {flips_text(r)} |\n")

    summary = {}
    for (model, k, ids, _, pinned, chunk, form), r in results:
        s = summary.setdefault((os.path.basename(model), pinned),
                               {"cases": 0, "fail": 0, "errors": 0, "worst": 0.0, "over": 0, "rows": 0, "mism": 0,
                                "near": 0, "moe": [0, 0], "dsa": [0, 0]})
        s["cases"] += 1
        if "error" in r:
            s["errors"] += 1
            s["fail"] += 1
            continue
        s["fail"] += 0 if r["ok"] else 1
        s["worst"] = max(s["worst"], r["diff"])
        for key in ("over", "rows", "mism", "near"):
            s[key] += r[key]
        if r["flips"]:
            for kind in ("moe", "dsa"):
                s[kind][0] += r["flips"][kind][0]
                s[kind][1] += r["flips"][kind][1]
    failures = sum(s["fail"] for (m, pinned), s in summary.items() if pinned)
    with open(os.path.join(outdir, "pinned_check_summary.md"), "w") as f:
        f.write(f"backend {BACKEND}, dtype {DTYPE}, forms {','.join(FORMS)}, pinned chunks {CHUNKS}, unpinned chunks "
                f"{UNPINNED_CHUNKS}; bound {TOL}; {len(results)} cases, {failures} pinned cases failing; "
                f"{time.time() - t0:.0f} s\n\n| model | decisions | cases | failing (errors) | worst max abs diff | "
                f"positions over bound | argmax mismatches | of which near-ties | moe flips / decisions | "
                f"dsa flips / decisions |\n|---|---|---|---|---|---|---|---|---|---|\n")
        for (m, pinned), s in sorted(summary.items(), key=lambda kv: (kv[0][0], not kv[0][1])):
            f.write(f"| {m} | {'pinned' if pinned else 'unpinned'} | {s['cases']} | {s['fail']} ({s['errors']}) | "
                    f"{s['worst']:.3e} | {s['over']}/{s['rows']} | {s['mism']} | {s['near']} | "
                    f"{s['moe'][1]}/{s['moe'][0]} | {s['dsa'][1]}/{s['dsa'][0]} |\n")
    print(open(os.path.join(outdir, "pinned_check_summary.md")).read())
    print(f"SUMMARY: {len(results)} cases, {failures} pinned cases failing, {time.time() - t0:.0f} s")
    sys.exit(1 if failures else 0)


def write_reference(path, ids, rows):
    """A reference.safetensors with input_ids_0 (i64 [n]) and logits_0 (f32 [n, vocab])."""
    import json
    import struct
    from array import array
    idb = struct.pack(f"<{len(ids)}q", *ids)
    lg = array("f")
    for r in rows:
        lg.extend(r)
    lgb = lg.tobytes()
    header = {"input_ids_0": {"dtype": "I64", "shape": [len(ids)], "data_offsets": [0, len(idb)]},
              "logits_0": {"dtype": "F32", "shape": [len(rows), len(rows[0])],
                           "data_offsets": [len(idb), len(idb) + len(lgb)]}}
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + idb + lgb)


def cut_config(config, n_layers):
    """config.json of the first n_layers layers: per-layer lists cut, 1-based layer lists filtered."""
    import copy
    c = copy.deepcopy(config)
    n = c["num_hidden_layers"]
    for key, v in list(c.items()):
        per_layer = isinstance(v, list) and key != "architectures" or key == "index_topk_pattern"
        if per_layer and isinstance(v, (list, str)) and len(v) == n:
            c[key] = v[:n_layers]
    lac = c.get("linear_attn_config")
    if isinstance(lac, dict):
        for key in ("kda_layers", "full_attn_layers"):
            if isinstance(lac.get(key), list):
                lac[key] = [i for i in lac[key] if i <= n_layers]
    c["num_hidden_layers"] = n_layers
    return c


def depths(binary, outroot, specs):
    import json
    for spec in specs:
        model, _, k = spec.partition(":")
        ps = list(prompts(model))
        k = int(k) if k else max(range(len(ps)), key=lambda i: len(ps[i][1]))
        ids = ps[k][1]
        config = json.load(open(os.path.join(model, "config.json")))
        for n_layers in range(1, config["num_hidden_layers"]):
            d = os.path.join(outroot, f"{os.path.basename(model)}_L{n_layers}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cut_config(config, n_layers), f, indent=1)
            for name in os.listdir(model):
                if name.startswith("model") and (name.endswith(".safetensors") or name.endswith(".json")):
                    link = os.path.join(d, name)
                    if os.path.lexists(link):
                        os.remove(link)
                    os.symlink(os.path.relpath(os.path.join(model, name), d), link)
            out = os.path.join(d, "cpu.safetensors")
            got, _, err = forward(binary, d, ids, out, ["--backend", "cpu", "--threads", "1"])
            if err:  # e.g. a depth the config cannot be cut to (K3: fewer layers than an AttnRes block)
                print(f"{d}: left out: {err}")
                import shutil
                shutil.rmtree(d)
                continue
            write_reference(os.path.join(d, "reference.safetensors"), ids, got)
            print(f"{d}: prompt {k} ({len(ids)} tokens), {n_layers} layers")


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "record":
        record(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "depths":
        depths(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) >= 5 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
