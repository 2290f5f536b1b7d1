#!/usr/bin/env python3
"""Markdown tables for docs/perf from tools/perf_layer_run.sh's $OUT folders: per op and per layer, Penstock
(penstock_<model>.json) beside the same-run torch baselines (torch_ops_<model>.json, torch_layer.jsonl), with the
PERF.md goal of each row and the gap to it.

  python3 tools/perf_layer_table.py OUT_DIR [OUT_DIR ...] > table.md

Ratio = torch time / Penstock time (> 1: Penstock faster). Memory-bound rows also give GB/s as a % of the measured
4.3 TB/s copy (PERF.md goal: >= 80%). The layer and part rows subtract the bench's own reset copy of the hidden
state (the engine does not make it), and say so."""
import json, os, sys

COPY_GBPS = 4300.0


def goal(op):
    if op.startswith("gemm."):
        return "≥ 0.95× torch", 0.95
    if op.startswith("grouped_gemm."):
        return "≥ 0.95× torch", 0.95
    if op.startswith("attention.mla_mha"):
        return "≥ 1.0× cuDNN SDPA", 1.0
    if op in ("moe.routing", "moe.align"):
        return "none (latency-bound at these sizes)", "none"
    return "≥ 80% of copy BW", None


def load(out_dirs):
    pen, tops, tlayer = {}, {}, {}
    for d in out_dirs:
        for f in sorted(os.listdir(d)):
            p = os.path.join(d, f)
            if f.startswith("penstock_") and f.endswith(".json"):
                for r in json.load(open(p)):
                    if r.get("bench") == "layer":
                        pen[(r["model"], r["tokens"], r["op"])] = r
            elif f.startswith("torch_ops_") and f.endswith(".json"):
                for r in json.load(open(p)):
                    if "time_ms" in r:
                        tops[(r["model"], r["tokens"], r["op"])] = r
            elif f == "torch_layer.jsonl":
                for line in open(p):
                    r = json.loads(line)
                    tlayer[(r["model"], r["tokens"], r["op"])] = r
    return pen, tops, tlayer


def rate(r):
    if r is None:
        return "–"
    if "tflops" in r:
        return f"{r['tflops']:.0f} TFLOP/s"
    if "gbps" in r:
        return f"{r['gbps']:.0f} GB/s ({100 * r['gbps'] / COPY_GBPS:.0f}%)"
    return "–"


def ops_table(model, pen, tops):
    tokens = sorted({k[1] for k in pen if k[0] == model})
    print(f"| op ({model}) | T | Penstock ms | Penstock rate | torch ms | torch rate (impl) | torch/Penstock | goal | gap |")
    print("|---|---|---|---|---|---|---|---|---|")
    for T in tokens:
        ops = [k[2] for k in pen if k[0] == model and k[1] == T and not k[2].startswith("part.") and k[2] != "layer"]
        for op in ops:
            p = pen[(model, T, op)]
            t = tops.get((model, T, op))
            g, need = goal(op)
            ratio = t["time_ms"] / p["time_ms"] if t else None
            if need == "none":
                gap = "–"
            elif need is not None:
                gap = "–" if ratio is None else ("met" if ratio >= need else f"{need / ratio:.2f}× short")
            else:
                frac = p.get("gbps", 0) / COPY_GBPS
                gap = "met" if frac >= 0.8 else f"{0.8 / frac:.1f}× short" if frac > 0 else "–"
            impl = f" ({t['impl']})" if t and "impl" in t else ""
            print(f"| {op} | {T // 1024}K | {p['time_ms']:.3f} | {rate(p)} | "
                  f"{t['time_ms']:.3f} | {rate(t)}{impl} | {ratio:.2f} | {g} | {gap} |" if t else
                  f"| {op} | {T // 1024}K | {p['time_ms']:.3f} | {rate(p)} | – | – | – | {g} | {gap} |")


def layer_table(model, pen, tlayer):
    tokens = sorted({k[1] for k in pen if k[0] == model})
    print(f"| {model} | T | Penstock ms (net of reset copy) | TFLOP/s | torch eager ms | torch.compile ms | "
          f"Penstock / compile speed | goal (≥ 1.2× compile) |")
    print("|---|---|---|---|---|---|---|---|")
    for T in tokens:
        for op in ("part.attention", "part.moe", "layer"):
            p = pen.get((model, T, op))
            if p is None:
                continue
            net = p["time_ms"] - p.get("includes_reset_copy_ms", 0.0)
            tf = p["flops"] / (net * 1e-3) / 1e12
            te = tlayer.get((model, T, op))
            tc = tlayer.get((model, T, "layer.compiled")) if op == "layer" else None
            sp = f"{tc['time_ms'] / net:.3f}×" if tc else "–"
            gl = (f"≤ {tc['time_ms'] / 1.2:.1f} ms: {net / (tc['time_ms'] / 1.2):.0f}× short" if tc else "–")
            print(f"| {op} | {T // 1024}K | {net:.1f} | {tf:.1f} | {te['time_ms']:.1f} | "
                  f"{tc['time_ms'] if tc else float('nan'):.1f} | {sp} | {gl} |" if te else
                  f"| {op} | {T // 1024}K | {net:.1f} | {tf:.1f} | – | – | – | – |")


def main():
    pen, tops, tlayer = load(sys.argv[1:])
    for model in sorted({k[0] for k in pen}):
        print(f"\n### {model}: per op\n")
        ops_table(model, pen, tops)
        print(f"\n### {model}: parts and layer\n")
        layer_table(model, pen, tlayer)


if __name__ == "__main__":
    main()
