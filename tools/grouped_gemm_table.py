#!/usr/bin/env python3
"""Markdown table from a tools/grouped_gemm_run.sh log: per DeepSeek-V3 / Kimi K3 expert shape, TFLOP/s of the
cuBLASLt path, every device kernel and torch._grouped_mm (same run), and each kernel's ratio to torch. Records with an
"knob" field (the measurement-knob reruns) get their own columns, suffixed @knob."""
import json
import sys


def main():
    rows = {}
    variants = []
    for line in open(sys.argv[1]):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("bench") != "grouped_gemm" or "tflops" not in r:
            continue
        v = r["variant"] if "knob" not in r else f'{r["variant"]}@{r["knob"].split("_")[-1]}'
        if v not in variants:
            variants.append(v)
        key = (r["model"], r["proj"], r["tokens"])
        rows.setdefault(key, {"n": r["n"], "k": r["k"], "rows": r["rows"]})[v] = r["tflops"]
    order = ["cublaslt", "torch._grouped_mm"]
    dev = [v for v in variants if v not in order]
    cols = ["cublaslt"] + dev + ["torch._grouped_mm"]
    print("| model | proj | T | rows | n | k | " + " | ".join(cols) + " | best device | best / torch |")
    print("|" + "---|" * (len(cols) + 8))
    for key in sorted(rows, key=lambda k: (k[0], k[1] != "gate_up", k[2])):
        r = rows[key]
        cells = [f'{r[c]:.0f}' if c in r else "-" for c in cols]
        best = max(dev, key=lambda c: r.get(c, 0.0)) if dev else None
        t = r.get("torch._grouped_mm")
        ratio = f'{r[best] / t:.2f}' if best and t and best in r else "-"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {r['rows']} | {r['n']} | {r['k']} | " + " | ".join(cells) +
              f" | {best} | {ratio} |")


if __name__ == "__main__":
    main()
