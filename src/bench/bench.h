// `penstock bench`: a load generator for /generate (SGLang bench_serving's random / random-ids datasets):
// fixed concurrency (and optional Poisson arrivals), streaming to time TTFT and inter-token latency, per-request
// JSONL and a summary JSON. Success means N/N requests completed without error (the exit code says so).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace penstock::bench {

struct BenchArgs {
    std::string base_url = "http://127.0.0.1:30000";
    std::string dataset = "random-ids";  // random-ids (token ids) | random (text of random words)
    int64_t input_len = 1024;
    int64_t output_len = 1;
    double range_ratio = 1.0;  // lengths uniform in [len * ratio, len]
    int64_t num_prompts = 40;
    int64_t max_concurrency = 8;
    double request_rate = 0;  // requests/s, Poisson arrivals; 0 = all at once (bounded by max_concurrency)
    uint64_t seed = 1;
    std::string output_file;   // per-request JSONL
    std::string summary_file;  // summary JSON
    double timeout_s = 600;    // per request
    int64_t vocab_size = 0;    // 0: ask /get_server_info
    bool quiet = false;        // no progress line
};

void add_bench_options(CLI::App* cmd, BenchArgs* args);

struct Percentiles {
    double mean = 0, p50 = 0, p95 = 0, p99 = 0, max = 0;
};
// Linear-interpolated percentiles (numpy's default); zeros for an empty sample.
Percentiles percentiles(std::vector<double> v);

// Runs the benchmark, prints the summary; returns the process exit code: 0 when every request completed without
// error, 1 when some failed, 2 for bad arguments or an unreachable server.
int run_bench(const BenchArgs& args);

}  // namespace penstock::bench
