// `penstock sweep SWEEP.toml`: the Deep-PP study workflow (SPEC §7). For each layout of the matrix: launch the
// servers (`mpirun -np pp*tp*cp penstock serve ...`, own process group), wait for /health, check /get_server_info
// against the requested layout, run `penstock bench` for every concurrency × repeat, validate N/N completed with no
// error, keep commands, logs, raw JSONL, summaries and memory snapshots per run, and always stop the servers. Then
// results.csv (per run), summary.csv (medians) and gnuplot PNGs. Layout and directory contract: docs/design/bench.md.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace penstock::bench {

struct SweepOptions {
    std::string config_path;   // the TOML matrix file
    std::string output_dir;    // "" = the file's output_dir
    std::string model;         // "" = the file's model
    std::string penstock;      // "" = the file's penstock, else this executable
    int repeats = 0;           // > 0: overrides the file's repeats (e.g. a quick pass over a study's matrix)
    int64_t num_prompts = 0;   // > 0: overrides the file's [bench] num_prompts / prompts_per_concurrency
    bool dry_run = false;      // print the commands only
    bool force = false;        // reuse an output directory that already holds a sweep
    bool report_only = false;  // run nothing: summary.csv, plots and sweep.json again from results.csv
    bool resume = false;       // keep the layouts whose runs in results.csv are all ok, run the others
};

void add_sweep_options(CLI::App* cmd, SweepOptions* opts);

// Runs the sweep; returns the process exit code: 0 when every run is ok (N/N, no error), 1 when any run or layout
// failed (and the plots failed while plots.required), 2 for a bad matrix file or output directory, 128 + signal when
// interrupted by SIGINT/SIGTERM (servers are stopped and the CSVs written first). Makes this process a child
// subreaper and installs SIGINT/SIGTERM handlers for its duration. With report_only it runs nothing and makes
// summary.csv, the plots and sweep.json again from the output directory's results.csv (0 / 1 as after a run, 2 when
// that file is missing or unreadable). With resume it keeps the layouts whose runs the output directory's
// results.csv already holds, all ok, and runs the others (a study split over several calls of a time limit).
int run_sweep(const SweepOptions& opts);

}  // namespace penstock::bench
