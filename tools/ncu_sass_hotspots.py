#!/usr/bin/env python3
"""Where a kernel's warps stall, per SASS instruction and per code region, from Nsight Compute's source page.

Input: the CSV of `ncu -i REPORT --page source --print-source sass --csv` for a report taken with the SourceCounters
section (tools/fp8_gemm_profile.sh MODE=sass writes one). Prints the top instructions by warp-stall samples with
their three largest stall reasons, then the code regions: runs of consecutive instructions with the same execution
count (a loop body, a once-per-tile block, the producer's loop), each with its share of all samples.

  tools/ncu_sass_hotspots.py src.wide.sass.csv [--top 40] [--min-region 0.5]
"""
import argparse
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # Row 0 names the kernel, row 1 is the header.
    header = rows[1]
    return rows[0], header, rows[2:]


def num(cell):
    try:
        return int(cell)
    except ValueError:
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40, help="instructions to list (default 40)")
    ap.add_argument("--min-region", type=float, default=0.5, help="smallest region share to list, percent")
    args = ap.parse_args()
    kernel, header, data = load(args.csv)
    col = {h: i for i, h in enumerate(header)}
    for need in ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"):
        if need not in col:
            sys.exit(f"{args.csv}: no '{need}' column (take the report with --section SourceCounters)")
    src, samples, execs = col["Source"], col["Warp Stall Sampling (All Samples)"], col["Instructions Executed"]
    reasons = [(i, h[len("stall_"):]) for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(num(r[samples]) for r in data)
    if total == 0:
        sys.exit(f"{args.csv}: no stall samples")
    print(f"{kernel[1] if len(kernel) > 1 else kernel[0]}"[:160])
    print(f"{total} samples, {len(data)} instructions\n")

    def top_reasons(counts, k=3):
        return " ".join(f"{name}:{100 * v / total:.1f}" for name, v in sorted(counts.items(), key=lambda x: -x[1])[:k] if v)

    print(f"top {args.top} instructions (index, share, executions, SASS, reasons in % of all samples)")
    order = sorted(range(len(data)), key=lambda j: -num(data[j][samples]))
    for j in order[: args.top]:
        r = data[j]
        counts = {name: num(r[i]) for i, name in reasons}
        print(f"{j:6d} {100 * num(r[samples]) / total:5.1f}% {r[execs]:>10s}  {r[src].strip()[:60]:60s} {top_reasons(counts)}")

    print(f"\nregions of one execution count with >= {args.min_region}% of the samples")
    regions = []
    for j, r in enumerate(data):
        if not regions or regions[-1]["exec"] != r[execs]:
            regions.append({"first": j, "last": j, "exec": r[execs], "samples": 0, "reasons": {}})
        g = regions[-1]
        g["last"] = j
        g["samples"] += num(r[samples])
        for i, name in reasons:
            g["reasons"][name] = g["reasons"].get(name, 0) + num(r[i])
    for g in regions:
        share = 100 * g["samples"] / total
        if share >= args.min_region:
            print(f"{g['first']:6d}-{g['last']:6d} exec {g['exec']:>10s} {share:5.1f}%  {top_reasons(g['reasons'], 4)}"
                  f"  | {data[g['first']][src].strip()[:40]}")


if __name__ == "__main__":
    main()
