#!/usr/bin/env python3
"""README.md (markdown on stdout) for a folder written by tools/deep_pp_8gpu.sh: the machine and commit
(machine.txt), then per model shape the summary.csv medians (throughput, TTFT, per-stage busy / bubble fractions,
boundary stall, peak memory per rank), the eager-bank-forwarding pairs (layouts `X` and `X_eager_bank`: stall and
throughput both ways), failed runs, and the plots. Stdlib only.
    tools/deep_pp_report.py OUT [--models glm k3] > OUT/README.md
Columns: docs/design/bench.md ("Pipeline and memory columns")."""
import argparse
import csv
import json
import os
import sys

NAMES = {"glm": "GLM-5.3 shape", "k3": "Kimi K3 shape"}


def read_csv(path):
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(cell, fmt="{:.1f}"):
    if cell in (None, ""):
        return "–"
    return fmt.format(float(cell))


def stage_list(cell, fmt="{:.2f}"):
    if not cell:
        return "–"
    return " / ".join(fmt.format(float(x)) for x in cell.split(";"))


def model_section(out, key):
    d = os.path.join(out, key)
    summary = read_csv(os.path.join(d, "summary.csv"))
    results = read_csv(os.path.join(d, "results.csv"))
    lines = [f"## {NAMES.get(key, key)} (`{key}/`)", ""]
    if not results:
        return lines + ["No results (the sweep did not run; see sweeps.log).", ""]
    manifest = {}
    if os.path.isfile(os.path.join(d, "sweep.json")):
        with open(os.path.join(d, "sweep.json")) as f:
            manifest = json.load(f)
    ok = sum(1 for r in results if r["status"] == "ok")
    info = next((l.get("server_info") or {} for l in manifest.get("layouts", []) if l.get("server_info")), {})
    lines.append(f"{ok}/{len(results)} runs ok (N/N requests, no error); sweep exit {manifest.get('exit_code', '?')}; "
                 f"model `{os.path.basename(str(info.get('model_path', '?')))}`, "
                 f"{info.get('num_hidden_layers', '?')} layers (override {info.get('num_layers_override')}), "
                 f"load format {info.get('load_format', '?')}, backend {info.get('backend', '?')}; "
                 f"{manifest.get('repeats', '?')} repeats of {manifest.get('num_prompts_per_run', '?')} requests "
                 f"per concurrency.")
    lines.append("")
    lines.append("Medians over the ok repeats (summary.csv). Busy = stage busy time / time with a micro-batch in "
                 "flight, averaged over stages; bubble = 1 - busy; boundary stall = seconds stages 1..P-1 waited on "
                 "their upstream stage per run (fraction of active time per boundary); peak memory = the largest "
                 "rank's VmHWM during the run (GPU: nvidia-smi used memory after the run).")
    lines.append("")
    lines.append("| layout | partition | C | ok | input tok/s | TTFT p50 ms | TTFT p95 ms | busy | bubble | "
                 "boundary stall s (frac) | peak RSS MiB/rank | GPU MiB/rank |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summary:
        stall = "–" if s["boundary_stall_s"] == "" else \
            f"{float(s['boundary_stall_s']):.3f} ({num(s['boundary_stall_frac'], '{:.2f}')})"
        lines.append(f"| {s['layout']} | {s['partition']} | {s['concurrency']} | {s['ok_runs']}/{s['runs']} | "
                     f"{num(s['input_tok_s'])} | {num(s['ttft_p50_ms'])} | {num(s['ttft_p95_ms'])} | "
                     f"{num(s['busy_frac_mean'], '{:.2f}')} | {num(s['bubble_frac_mean'], '{:.2f}')} | {stall} | "
                     f"{num(s['peak_rss_mib_max'], '{:.0f}')} | {num(s['gpu_mem_mib_max'], '{:.0f}')} |")
    lines.append("")
    pp = [s for s in summary if int(s["pp"]) > 1]
    if pp:
        lines.append("Per stage (PP layouts; stage 0's stall is its wait for the last stage's results, not a "
                     "boundary):")
        lines.append("")
        lines.append("| layout | C | busy fraction per stage | stall s per stage | peak RSS MiB per rank |")
        lines.append("|---|---|---|---|---|")
        for s in pp:
            lines.append(f"| {s['layout']} | {s['concurrency']} | {stage_list(s['stage_busy_frac'])} | "
                         f"{stage_list(s['stage_stall_s'], '{:.3f}')} | "
                         f"{stage_list(s['peak_rss_mib_ranks'], '{:.0f}')} |")
        lines.append("")
    by = {(s["layout"], s["concurrency"]): s for s in summary}
    pairs = sorted({l[: -len("_eager_bank")] for l, _ in by if l.endswith("_eager_bank")})
    for base in pairs:
        lines.append(f"Eager bank forwarding at `{base}`: off (`{base}`) vs on (`{base}_eager_bank`):")
        lines.append("")
        lines.append("| C | input tok/s off | on | on/off | TTFT p50 ms off | on | boundary stall s off | on |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for (layout, c), off in by.items():
            if layout != base or (base + "_eager_bank", c) not in by:
                continue
            on = by[(base + "_eager_bank", c)]
            ratio = "–"
            if off["input_tok_s"] and on["input_tok_s"] and float(off["input_tok_s"]) > 0:
                ratio = f"{float(on['input_tok_s']) / float(off['input_tok_s']):.3f}"
            lines.append(f"| {c} | {num(off['input_tok_s'])} | {num(on['input_tok_s'])} | {ratio} | "
                         f"{num(off['ttft_p50_ms'])} | {num(on['ttft_p50_ms'])} | "
                         f"{num(off['boundary_stall_s'], '{:.3f}')} | {num(on['boundary_stall_s'], '{:.3f}')} |")
        lines.append("")
    failed = [r for r in results if r["status"] != "ok"]
    if failed:
        lines.append(f"Runs not ok ({len(failed)}):")
        lines.append("")
        for r in failed[:20]:
            lines.append(f"- {r['layout']} C={r['concurrency']} r{r['repeat']}: {r['status']}: {r['error'][:300]}")
        lines.append("")
    for p in manifest.get("plots", []):
        lines.append(f"![{key} {os.path.basename(p)}]({key}/{p})")
    if manifest.get("plot_error"):
        lines.append(f"Plots: {manifest['plot_error']}")
    lines.append("")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--models", nargs="+", default=["glm", "k3"])
    args = ap.parse_args()
    machine = ""
    if os.path.isfile(os.path.join(args.out, "machine.txt")):
        with open(os.path.join(args.out, "machine.txt")) as f:
            machine = f.read().rstrip()
    title = os.path.basename(os.path.abspath(args.out))
    lines = [f"# {title}: the Deep-PP protocol (SPEC §7)", "",
             "Written by `tools/deep_pp_8gpu.sh` (sweep files `bench/sweeps/deep_pp_*.toml`, columns and method in "
             "docs/design/bench.md \"The Deep-PP study\"). Per model: `results.csv` (one row per run), `summary.csv` "
             "(medians), `plots/`, and every run's commands, logs, raw JSONL, /metrics scrapes and memory snapshots.",
             "", "```", machine, "```", ""]
    for key in args.models:
        lines += model_section(args.out, key)
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
