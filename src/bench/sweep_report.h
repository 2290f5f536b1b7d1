// Sweep results: one RunRow per (layout, concurrency, repeat), the per-(layout, concurrency) medians, their CSV
// renderings (results.csv, summary.csv) and the gnuplot scripts and data behind the PNG plots. Pure functions of the
// rows except write_plot_files, which writes into a directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace penstock::bench {

// Statuses of one run. Only kOk counts as a success; every other value makes the sweep's exit code 1.
inline constexpr const char* kRunOk = "ok";                             // N/N completed, no error
inline constexpr const char* kRunFailed = "failed";                     // bench ran, some requests failed
inline constexpr const char* kRunBenchError = "bench_error";            // bench did not run or wrote no summary
inline constexpr const char* kRunTimeout = "timeout";                   // ran past timeouts.run_s
inline constexpr const char* kRunServerStartFailed = "server_start_failed";  // exited / could not launch
inline constexpr const char* kRunServerStartTimeout = "server_start_timeout";  // not healthy in time
inline constexpr const char* kRunLayoutMismatch = "layout_mismatch";    // /get_server_info disagrees
inline constexpr const char* kRunServerDied = "server_died";            // server exited during the layout
inline constexpr const char* kRunInterrupted = "interrupted";           // SIGINT/SIGTERM before it ran

// The measurements of one bench run (units in the names).
struct RunMetrics {
    int64_t completed = 0;
    int64_t failed = 0;
    double ttft_mean_ms = 0, ttft_p50_ms = 0, ttft_p95_ms = 0, ttft_p99_ms = 0;
    double e2e_p50_ms = 0;
    double input_tok_s = 0, output_tok_s = 0;
    double duration_s = 0;
};

// Server-side measurements of one run (docs/design/bench.md, "Pipeline and memory columns"). An empty vector or
// nullopt: not measured (the scrape failed, or no GPU).
struct ServerStats {
    // From /metrics scraped before and after the run (differences of the step executor's counters).
    std::optional<double> active_s;           // wall time with at least one micro-batch in flight
    std::vector<double> stage_busy_fraction;  // per stage: busy seconds / active_s
    std::vector<double> stage_stall_s;        // per stage: seconds blocked receiving from the previous stage (stage 0:
                                              // waiting for the last stage's results)
    // From /proc and nvidia-smi, per MPI rank (index = rank).
    std::vector<double> peak_rss_mib;  // VmHWM after the run (reset to the current RSS just before it when possible)
    std::vector<double> gpu_mem_mib;   // nvidia-smi per-process used_memory after the run; empty without GPUs

    // Derived cells (pipeline ones are nullopt without stage counters).
    std::optional<double> busy_fraction_mean() const;
    std::optional<double> busy_fraction_min() const;
    std::optional<double> bubble_fraction_mean() const;  // 1 - busy_fraction_mean
    // Sum over stages 1..P-1 (the boundaries; 0 with one stage), and that sum / (active_s * (P - 1)).
    std::optional<double> boundary_stall_s() const;
    std::optional<double> boundary_stall_fraction() const;
};

// Cumulative step-executor counters of one /metrics scrape.
struct PipelineCounters {
    double active_s = 0;          // penstock_pp_active_seconds_total
    std::vector<double> busy_s;   // per stage: penstock_pp_stage_busy_seconds_total{stage="s"}
    std::vector<double> stall_s;  // per stage: penstock_pp_stage_stall_seconds_total{stage="s"}
};

// Parses the counters above from Prometheus text; an error naming the metric when one is missing or the stage labels
// are not 0..P-1.
[[nodiscard]] Result<PipelineCounters> parse_pipeline_counters(const std::string& prometheus_text);

// Fills the pipeline fields of `out` from two scrapes (after - before). An error when the stage counts differ or a
// counter went backwards (a restarted server).
[[nodiscard]] Status pipeline_run_stats(const PipelineCounters& before, const PipelineCounters& after,
                                        ServerStats* out);

// `nvidia-smi --query-compute-apps=pid,used_memory` or `--query-gpu=index,memory.used` output
// (`--format=csv,noheader,nounits`) -> (pid or GPU index, MiB) pairs; lines that do not parse are skipped.
std::vector<std::pair<int64_t, double>> parse_gpu_process_memory(const std::string& text);

struct RunRow {
    std::string layout;
    int pp = 1, tp = 1, ep = 1, cp = 1;
    std::string partition;  // "7,5,6" or ""
    int64_t concurrency = 0;
    int repeat = 0;  // 1-based
    int64_t num_prompts = 0;
    std::string status;                 // one of the kRun* values
    std::optional<RunMetrics> metrics;  // absent when the bench produced no summary
    ServerStats server;                 // pipeline counters and per-rank memory (empty when not measured)
    std::string error;                  // "" when ok
    std::string dir;                    // run directory, relative to the output dir
};

// Parses `penstock bench --summary-file` JSON into metrics; an error when a field is missing.
[[nodiscard]] Result<RunMetrics> metrics_from_summary_json(const std::string& text);

// Median of the values (mean of the two middle ones for an even count); nullopt for none.
std::optional<double> median(std::vector<double> v);

struct SummaryRow {
    std::string layout;
    int pp = 1, tp = 1, ep = 1, cp = 1;
    std::string partition;
    int64_t concurrency = 0;
    int runs = 0;
    int ok_runs = 0;
    std::optional<RunMetrics> median;  // field-wise medians over the ok runs; absent when none is ok
    // Element-wise medians over the ok runs that measured each field (a per-stage or per-rank vector only when every
    // such run has the same length).
    ServerStats server_median;
};

// Groups rows by (layout, concurrency) in first-appearance order and takes field-wise medians of the ok runs.
std::vector<SummaryRow> summarize(const std::vector<RunRow>& rows);

// RFC 4180 CSV with a header line; empty cells where a row has no metrics.
std::string results_csv(const std::vector<RunRow>& rows);
std::string summary_csv(const std::vector<SummaryRow>& rows);

// The rows of a results.csv that results_csv wrote (this build's columns), so that the summary and plots of a sweep
// cut short can be made again (`penstock sweep --report-only`): results_csv(parse_results_csv(t)) == t, up to the
// last printed digit of the cells derived from the per-stage lists (recomputed from their 6 printed digits; so are the
// medians of summarize, which then agree with the run's to about 1e-5 relative). An error
// naming the line for another header, a row of the wrong width or a cell that is not a number where one belongs.
[[nodiscard]] Result<std::vector<RunRow>> parse_results_csv(const std::string& text);

struct PlotScript {
    std::string script;  // file name of the .gp, relative to the plots directory
    std::string png;     // file name of the PNG it draws
};

// Writes data/<layout>.dat (concurrency, input tok/s, TTFT p50, TTFT p95, bubble fraction, boundary stall fraction of
// layouts with ok runs; "NaN" where not measured) and input_tps.gp / ttft.gp / pipeline.gp under `plots_dir`; running
// gnuplot in that directory draws input_tps.png, ttft.png and pipeline.png.
// `title` heads every plot. An error if there is nothing to plot or a file cannot be written.
[[nodiscard]] Result<std::vector<PlotScript>> write_plot_files(const std::string& plots_dir,
                                                               const std::vector<SummaryRow>& rows,
                                                               const std::string& terminal, const std::string& title);

}  // namespace penstock::bench
