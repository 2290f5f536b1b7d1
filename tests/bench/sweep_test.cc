// `penstock sweep` host logic: matrix-file parsing (defaults, and bad input rejected with the key named), medians and
// CSV rendering, plot scripts, and the process helpers (tree stop leaves nothing behind).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench/process.h"
#include "bench/sweep_config.h"
#include "bench/sweep_report.h"

namespace penstock::bench {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMinimal = R"(
output_dir = "out"
model = "m"
concurrencies = [2, 4]
[bench]
input_len = 64
num_prompts = 8
[[layouts]]
pp = 2
)";

std::string parse_error(const std::string& text) {
    Result<SweepConfig> c = parse_sweep_config(text, "t.toml");
    EXPECT_FALSE(c.ok()) << "parsed:\n" << text;
    return c.ok() ? "" : c.status().message();
}

TEST(SweepConfig, MinimalFileGetsDefaults) {
    Result<SweepConfig> c = parse_sweep_config(kMinimal, "t.toml");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->output_dir, "out");
    EXPECT_EQ(c->concurrencies, (std::vector<int64_t>{2, 4}));
    EXPECT_EQ(c->repeats, 1);
    EXPECT_EQ(c->port_base, 0);
    ASSERT_EQ(c->layouts.size(), 1u);
    EXPECT_EQ(c->layouts[0].name, "pp2_tp1_ep1_cp1");
    EXPECT_EQ(c->layouts[0].np(), 2);
    EXPECT_EQ(c->launcher.mpirun, "mpirun");
    EXPECT_EQ(c->bench.dataset, "random-ids");
    EXPECT_EQ(c->bench.prompts_for(4), 8);
    EXPECT_EQ(c->plots.terminal, "pngcairo");
}

TEST(SweepConfig, FullFile) {
    Result<SweepConfig> c = parse_sweep_config(R"(
output_dir = "o"
model = "m"
penstock = "/bin/true"
port_base = 31000
server_args = ["--threads", "1"]
concurrencies = [8, 16]
repeats = 3
[launcher]
mpirun = "/usr/bin/mpirun"
args = ["--oversubscribe"]
always = true
env = { A = "1", B = 2 }
[bench]
dataset = "random"
input_len = 16384
output_len = 1
range_ratio = 1
prompts_per_concurrency = 5
seed = 7
request_timeout_s = 30.5
args = ["--request-rate", "4"]
[timeouts]
server_start_s = 900
run_s = 1200
stop_grace_s = 0
[plots]
enabled = false
terminal = "png"
required = true
[[layouts]]
name = "deep"
pp = 4
tp = 2
ep = 2
pp_layer_partition = "7,5,7,5"
args = ["--chunked-prefill-size", "8192"]
[[layouts]]
pp = 2
pp_layer_partition = [12, 12]
)",
                                               "full.toml");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->launcher.env, (std::vector<std::pair<std::string, std::string>>{{"A", "1"}, {"B", "2"}}));
    EXPECT_TRUE(c->launcher.always);
    EXPECT_EQ(c->bench.prompts_for(16), 80);
    EXPECT_DOUBLE_EQ(c->bench.request_timeout_s, 30.5);
    EXPECT_EQ(c->layouts[0].name, "deep");
    EXPECT_EQ(c->layouts[0].np(), 8);
    EXPECT_EQ(c->layouts[0].partition_string(), "7,5,7,5");
    EXPECT_EQ(c->layouts[1].pp_layer_partition, (std::vector<int64_t>{12, 12}));
    EXPECT_EQ(c->timeouts.stop_grace_s, 0);
    EXPECT_FALSE(c->plots.enabled);
}

TEST(SweepConfig, BadInputNamesTheKeyAndLine) {
    const std::string base = kMinimal;
    // Missing required keys.
    EXPECT_NE(parse_error("model = \"m\"\n").find("output_dir: is required"), std::string::npos);
    EXPECT_NE(parse_error("output_dir = \"o\"\nmodel = \"m\"\nconcurrencies = [1]\n[[layouts]]\n")
                  .find("bench: is required"),
              std::string::npos);
    // Wrong types and ranges, with file:line.
    std::string e = parse_error(base + "[[layouts]]\npp = \"two\"\n");
    EXPECT_NE(e.find("t.toml:11:"), std::string::npos) << e;
    EXPECT_NE(e.find("layouts[1].pp: must be an integer (got a string)"), std::string::npos) << e;
    e = parse_error("output_dir = \"o\"\nmodel = \"m\"\nconcurrencies = [2, 0]\n[bench]\ninput_len = 1\n"
                    "num_prompts = 1\n[[layouts]]\n");
    EXPECT_NE(e.find("concurrencies[1]: must be in [1, "), std::string::npos) << e;
    e = parse_error(base + "repeats = 0\n");
    EXPECT_NE(e.find("repeats"), std::string::npos) << e;  // after [[layouts]]: a layout key, still named
    // Unknown keys (typos) are errors, at top level and inside tables.
    e = parse_error("concurency = [1]\n" + base);
    EXPECT_NE(e.find("concurency: unknown key"), std::string::npos) << e;
    e = parse_error("output_dir = \"o\"\nmodel = \"m\"\nconcurency = [1]\n");
    EXPECT_NE(e.find("concurrencies: is required (found 'concurency': a typo?)"), std::string::npos) << e;
    e = parse_error(base + "[timeouts]\nserver_start = 5\n");
    EXPECT_NE(e.find("timeouts.server_start: unknown key"), std::string::npos) << e;
    e = parse_error(base + "[[layouts]]\npp = 2\ntensor = 2\n");
    EXPECT_NE(e.find("layouts[1].tensor: unknown key"), std::string::npos) << e;
    // Layout consistency.
    e = parse_error(base + "[[layouts]]\ntp = 4\nep = 3\n");
    EXPECT_NE(e.find("layouts[1].ep: must divide tp (got tp=4, ep=3)"), std::string::npos) << e;
    e = parse_error(base + "[[layouts]]\npp = 3\npp_layer_partition = [1, 2]\n");
    EXPECT_NE(e.find("layouts[1].pp_layer_partition: has 2 entries but pp = 3"), std::string::npos) << e;
    e = parse_error(base + "[[layouts]]\npp = 2\npp_layer_partition = \"1,x\"\n");
    EXPECT_NE(e.find("layouts[1].pp_layer_partition: must list layer counts"), std::string::npos) << e;
    e = parse_error(base + "[[layouts]]\npp = 2\n");
    EXPECT_NE(e.find("duplicate layout name \"pp2_tp1_ep1_cp1\""), std::string::npos) << e;
    e = parse_error(base + "[[layouts]]\nname = \"a/b\"\n");
    EXPECT_NE(e.find("layouts[1].name: must use only letters"), std::string::npos) << e;
    // Bench.
    e = parse_error("output_dir = \"o\"\nmodel = \"m\"\nconcurrencies = [1]\n[bench]\ninput_len = 1\n[[layouts]]\n");
    EXPECT_NE(e.find("exactly one of bench.num_prompts and bench.prompts_per_concurrency"), std::string::npos) << e;
    e = parse_error("output_dir = \"o\"\nmodel = \"m\"\nconcurrencies = [1]\n[bench]\ninput_len = 1\n"
                    "num_prompts = 1\ndataset = \"sharegpt\"\n[[layouts]]\n");
    EXPECT_NE(e.find("bench.dataset: must be \"random\" or \"random-ids\""), std::string::npos) << e;
    e = parse_error("output_dir = \"o\"\nmodel = \"m\"\nconcurrencies = [1]\n[bench]\ninput_len = 1\n"
                    "num_prompts = 1\nrange_ratio = 1.5\n[[layouts]]\n");
    EXPECT_NE(e.find("bench.range_ratio: must be in [0, 1] (got 1.5)"), std::string::npos) << e;
    e = parse_error(base + "[launcher]\nenv = { A = true }\n");
    EXPECT_NE(e.find("launcher.env.A: must be a string or an integer"), std::string::npos) << e;
    e = parse_error("layouts = 3\n" + base);
    EXPECT_NE(e.find("layouts"), std::string::npos) << e;
    // TOML syntax.
    e = parse_error("output_dir = \"o\nmodel = 1\n");
    EXPECT_NE(e.find("t.toml:1:"), std::string::npos) << e;
    EXPECT_NE(e.find("TOML syntax"), std::string::npos) << e;
    // Missing file.
    Result<SweepConfig> missing = load_sweep_config("/nonexistent/sweep.toml");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.status().message().find("/nonexistent/sweep.toml"), std::string::npos);
}

TEST(SweepConfig, CommittedCiMatrixParses) {
    Result<SweepConfig> c = load_sweep_config(std::string(PENSTOCK_SOURCE_DIR) + "/bench/sweeps/ci_tiny.toml");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_GE(c->layouts.size(), 1u);
    EXPECT_EQ(c->concurrencies, (std::vector<int64_t>{2, 4}));
    EXPECT_EQ(c->repeats, 2);
}

// The Deep-PP study files encode SPEC §7's fixed variables (input 16384, output 1, chunk 8192, C 8 and 16, 40 requests,
// 3 repeats) and the layouts of docs/design/bench.md; the CPU files keep the layouts and counts at tiny sizes.
TEST(SweepConfig, CommittedDeepPpStudyFiles) {
    const auto has_pair = [](const std::vector<std::string>& args, const std::string& key, const std::string& value) {
        for (size_t i = 0; i + 1 < args.size(); ++i) {
            if (args[i] == key && args[i + 1] == value) return true;
        }
        return false;
    };
    const std::pair<const char*, std::vector<std::string>> files[] = {
        {"deep_pp_8gpu_glm", {"tp8_ep8", "pp2_tp4_ep4", "pp4_tp2_ep2", "pp8"}},
        {"deep_pp_8gpu_k3", {"tp8_ep8", "pp2_tp4_ep4", "pp4_tp2_ep2", "pp8", "pp8_eager_bank"}},
        {"deep_pp_2gpu_glm", {"tp2_ep2", "pp2"}},
        {"deep_pp_2gpu_k3", {"tp2_ep2", "pp2", "pp2_eager_bank"}},
        {"deep_pp_cpu_tiny_glm", {"tp8_ep8", "pp2_tp4_ep4", "pp4_tp2_ep2", "pp8"}},
        {"deep_pp_cpu_tiny_k3", {"tp8_ep8", "pp2_tp4_ep4", "pp4_tp2_ep2", "pp8", "pp8_eager_bank"}}};
    for (const auto& [name, layouts] : files) {
        Result<SweepConfig> c = load_sweep_config(std::string(PENSTOCK_SOURCE_DIR) + "/bench/sweeps/" + name + ".toml");
        ASSERT_TRUE(c.ok()) << name << ": " << c.status().to_string();
        const bool cpu = std::string(name).find("cpu") != std::string::npos;
        const int np = std::string(name).find("2gpu") != std::string::npos ? 2 : 8;
        EXPECT_EQ(c->concurrencies, (std::vector<int64_t>{8, 16})) << name;
        EXPECT_EQ(c->repeats, 3) << name;
        EXPECT_EQ(c->bench.num_prompts, 40) << name;
        EXPECT_EQ(c->bench.output_len, 1) << name;
        EXPECT_EQ(c->bench.input_len, cpu ? 256 : 16384) << name;
        EXPECT_TRUE(has_pair(c->server_args, "--chunked-prefill-size", cpu ? "128" : "8192")) << name;
        EXPECT_TRUE(has_pair(c->server_args, "--load-format", "dummy")) << name;
        EXPECT_EQ(has_pair(c->server_args, "--backend", "cuda"), !cpu) << name;
        // GLM runs the FP8 indexer of production servers (docs/perf/2026-12-01-serve-vs-bench.md); K3 has no indexer.
        const bool glm = std::string(name).find("glm") != std::string::npos;
        EXPECT_EQ(std::find(c->server_args.begin(), c->server_args.end(), "--dsa-fp8-indexer") != c->server_args.end(),
                  glm)
            << name;
        ASSERT_EQ(c->layouts.size(), layouts.size()) << name;
        for (size_t i = 0; i < layouts.size(); ++i) {
            const SweepLayout& l = c->layouts[i];
            EXPECT_EQ(l.name, layouts[i]) << name;
            EXPECT_EQ(l.np(), np) << name << " " << l.name;
            EXPECT_EQ(l.ep, l.tp) << name << " " << l.name;  // EP as the layout allows
            const bool eager = std::find(l.args.begin(), l.args.end(), "--pp-eager-bank-forward") != l.args.end();
            EXPECT_EQ(eager, l.name.find("_eager_bank") != std::string::npos) << name << " " << l.name;
        }
    }
}

TEST(SweepReport, Median) {
    EXPECT_FALSE(median({}).has_value());
    EXPECT_DOUBLE_EQ(*median({3}), 3);
    EXPECT_DOUBLE_EQ(*median({5, 1, 3}), 3);
    EXPECT_DOUBLE_EQ(*median({4, 1, 3, 2}), 2.5);
    EXPECT_DOUBLE_EQ(*median({2, 2}), 2);
}

RunRow row(const std::string& layout, int64_t c, int r, const char* status, double tps, double ttft) {
    RunRow x;
    x.layout = layout;
    x.pp = 2;
    x.concurrency = c;
    x.repeat = r;
    x.num_prompts = 8;
    x.status = status;
    RunMetrics m;
    m.completed = 8;
    m.input_tok_s = tps;
    m.ttft_p50_ms = ttft;
    m.ttft_p95_ms = 2 * ttft;
    x.metrics = m;
    x.dir = layout + "/c" + std::to_string(c) + "_r" + std::to_string(r);
    return x;
}

TEST(SweepReport, SummaryTakesMediansOfOkRunsOnly) {
    std::vector<RunRow> rows = {row("a", 2, 1, kRunOk, 100, 10), row("a", 2, 2, kRunOk, 300, 30),
                                row("a", 2, 3, kRunOk, 200, 50), row("a", 4, 1, kRunOk, 400, 40),
                                row("a", 4, 2, kRunFailed, 1, 1), row("b", 2, 1, kRunServerStartFailed, 0, 0)};
    rows.back().metrics.reset();
    const std::vector<SummaryRow> s = summarize(rows);
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(s[0].layout, "a");
    EXPECT_EQ(s[0].concurrency, 2);
    EXPECT_EQ(s[0].runs, 3);
    EXPECT_EQ(s[0].ok_runs, 3);
    ASSERT_TRUE(s[0].median);
    EXPECT_DOUBLE_EQ(s[0].median->input_tok_s, 200);
    EXPECT_DOUBLE_EQ(s[0].median->ttft_p50_ms, 30);
    EXPECT_DOUBLE_EQ(s[0].median->ttft_p95_ms, 60);
    EXPECT_EQ(s[1].runs, 2);
    EXPECT_EQ(s[1].ok_runs, 1);
    EXPECT_DOUBLE_EQ(s[1].median->input_tok_s, 400);  // the failed repeat is not in the median
    EXPECT_EQ(s[2].layout, "b");
    EXPECT_EQ(s[2].ok_runs, 0);
    EXPECT_FALSE(s[2].median);

    const std::string csv = summary_csv(s);
    std::istringstream in(csv);
    std::string header, line;
    std::getline(in, header);
    EXPECT_EQ(header,
              "layout,pp,tp,ep,cp,partition,concurrency,runs,ok_runs,ttft_mean_ms,ttft_p50_ms,ttft_p95_ms,"
              "ttft_p99_ms,e2e_p50_ms,input_tok_s,output_tok_s,duration_s,stages,busy_frac_mean,busy_frac_min,"
              "bubble_frac_mean,boundary_stall_s,boundary_stall_frac,active_s,stage_busy_frac,stage_stall_s,"
              "peak_rss_mib_max,peak_rss_mib_ranks,gpu_mem_mib_max,gpu_mem_mib_ranks");
    std::getline(in, line);
    EXPECT_EQ(line, "a,2,1,1,1,,2,3,3,0,30,60,0,0,200,0,0,,,,,,,,,,,,,");
    std::getline(in, line);
    std::getline(in, line);
    EXPECT_EQ(line, "b,2,1,1,1,,2,1,0,,,,,,,,,,,,,,,,,,,,,");
}

// An ok PP2 run with server-side measurements (partition, active time, per-stage busy / stall, per-rank RSS).
RunRow measured_pp2_row() {
    RunRow ok = row("pp2", 4, 1, kRunOk, 1234.5, 12.25);
    ok.partition = "2,2";
    ok.server.active_s = 4;
    ok.server.stage_busy_fraction = {0.5, 1.0};
    ok.server.stage_stall_s = {0.25, 1.5};
    ok.server.peak_rss_mib = {1024, 1536};
    return ok;
}

TEST(SweepReport, ResultsCsvQuotesAndLeavesEmptyCells) {
    RunRow ok = measured_pp2_row();
    RunRow bad = row("pp2", 4, 2, kRunServerStartFailed, 0, 0);
    bad.metrics.reset();
    bad.error = "server exited, said \"no\"";
    const std::string csv = results_csv({ok, bad});
    std::istringstream in(csv);
    std::string header, l1, l2;
    std::getline(in, header);
    std::getline(in, l1);
    std::getline(in, l2);
    EXPECT_EQ(header,
              "layout,pp,tp,ep,cp,partition,concurrency,repeat,status,num_prompts,completed,failed,ttft_mean_ms,"
              "ttft_p50_ms,ttft_p95_ms,ttft_p99_ms,e2e_p50_ms,input_tok_s,output_tok_s,duration_s,stages,"
              "busy_frac_mean,busy_frac_min,bubble_frac_mean,boundary_stall_s,boundary_stall_frac,active_s,"
              "stage_busy_frac,stage_stall_s,peak_rss_mib_max,peak_rss_mib_ranks,gpu_mem_mib_max,gpu_mem_mib_ranks,"
              "error,dir");
    EXPECT_EQ(l1,
              "pp2,2,1,1,1,\"2,2\",4,1,ok,8,8,0,0,12.25,24.5,0,0,1234.5,0,0,2,0.75,0.5,0.25,1.5,0.375,4,0.5;1,0.25;1.5,"
              "1536,1024;1536,,,,pp2/c4_r1");
    EXPECT_EQ(l2,
              "pp2,2,1,1,1,,4,2,server_start_failed,8,,,,,,,,,,,,,,,,,,,,,,,,"
              "\"server exited, said \"\"no\"\"\",pp2/c4_r2");
}

// results.csv reads back into the rows it was written from (quoted cells, empty metrics, per-stage and per-rank lists,
// CRLF line ends too), and a file of other columns or a bad cell is refused with its line.
TEST(SweepReport, ResultsCsvReadsBack) {
    RunRow ok = measured_pp2_row();
    ok.server.gpu_mem_mib = {36968, 48012};
    RunRow bad = row("pp2", 16, 2, kRunInterrupted, 0, 0);
    bad.metrics.reset();
    bad.error = "interrupted, said \"stop\"\nby signal 2";
    const std::string csv = results_csv({ok, bad});
    Result<std::vector<RunRow>> back = parse_results_csv(csv);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back->size(), 2u);
    EXPECT_EQ(results_csv(*back), csv);
    EXPECT_EQ((*back)[0].partition, "2,2");
    EXPECT_EQ((*back)[0].server.gpu_mem_mib, (std::vector<double>{36968, 48012}));
    EXPECT_DOUBLE_EQ((*back)[0].metrics->input_tok_s, 1234.5);
    EXPECT_FALSE((*back)[1].metrics.has_value());
    EXPECT_EQ((*back)[1].error, bad.error);
    EXPECT_EQ((*back)[1].concurrency, 16);
    // The summary of the rows read back equals the summary of the rows written.
    EXPECT_EQ(summary_csv(summarize(*back)), summary_csv(summarize({ok, bad})));
    std::string crlf;
    for (char c : csv) {
        if (c == '\n' && (crlf.empty() || crlf.back() != '"')) crlf += "\r";
        crlf += c;
    }
    Result<std::vector<RunRow>> back_crlf = parse_results_csv(crlf);
    ASSERT_TRUE(back_crlf.ok()) << back_crlf.status().to_string();
    EXPECT_EQ(back_crlf->size(), 2u);
    EXPECT_EQ((*back_crlf)[0].server.stage_stall_s, ok.server.stage_stall_s);

    const auto refused = [](const std::string& text, const std::string& needle) {
        const Result<std::vector<RunRow>> r = parse_results_csv(text);
        ASSERT_FALSE(r.ok()) << needle;
        EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    };
    refused("", "empty");
    refused("layout,pp\nx,1\n", "line 1: not the header");
    const std::string header = csv.substr(0, csv.find('\n') + 1);
    refused(header + "pp2,2,1\n", "line 2: 3 cells");
    std::string bad_cell = csv;
    bad_cell.replace(bad_cell.find("1234.5"), 6, "12x4.5");
    refused(bad_cell, "line 2: a metric '12x4.5' is not a number");
    refused(header + "\"pp2,2\n", "unterminated quoted field");
}

TEST(SweepReport, ServerStatsDerivedCells) {
    ServerStats s;
    EXPECT_FALSE(s.busy_fraction_mean());
    EXPECT_FALSE(s.boundary_stall_s());
    s.active_s = 10;
    s.stage_busy_fraction = {0.9, 0.6, 0.3};
    s.stage_stall_s = {4, 1, 2};  // stage 0 waits on results: not a boundary stall
    EXPECT_DOUBLE_EQ(*s.busy_fraction_mean(), 0.6);
    EXPECT_DOUBLE_EQ(*s.busy_fraction_min(), 0.3);
    EXPECT_DOUBLE_EQ(*s.bubble_fraction_mean(), 0.4);
    EXPECT_DOUBLE_EQ(*s.boundary_stall_s(), 3);
    EXPECT_DOUBLE_EQ(*s.boundary_stall_fraction(), 3.0 / (10 * 2));
    ServerStats one;  // one stage: no boundary
    one.active_s = 2;
    one.stage_busy_fraction = {0.8};
    one.stage_stall_s = {0.5};
    EXPECT_DOUBLE_EQ(*one.boundary_stall_s(), 0);
    EXPECT_DOUBLE_EQ(*one.boundary_stall_fraction(), 0);
}

constexpr const char* kMetricsBefore = R"(# HELP penstock_pp_active_seconds_total Wall time
# TYPE penstock_pp_active_seconds_total counter
penstock_pp_active_seconds_total 10
penstock_pp_stage_busy_seconds_total{stage="0"} 8
penstock_pp_stage_busy_seconds_total{stage="1"} 5
penstock_pp_stage_busy_fraction{stage="0"} 0.8
penstock_pp_stage_stall_seconds_total{stage="0"} 1
penstock_pp_stage_stall_seconds_total{stage="1"} 2.5
penstock_pp_stage_steps_total{stage="0"} 40
penstock_pp_active_seconds_total_bogus 99
)";

TEST(SweepReport, PipelineCountersFromMetrics) {
    Result<PipelineCounters> b = parse_pipeline_counters(kMetricsBefore);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_DOUBLE_EQ(b->active_s, 10);
    EXPECT_EQ(b->busy_s, (std::vector<double>{8, 5}));
    EXPECT_EQ(b->stall_s, (std::vector<double>{1, 2.5}));
    const std::string after_text =
        "penstock_pp_active_seconds_total 14\n"
        "penstock_pp_stage_busy_seconds_total{stage=\"1\"} 7\n"  // order does not matter
        "penstock_pp_stage_busy_seconds_total{stage=\"0\"} 11\n"
        "penstock_pp_stage_stall_seconds_total{stage=\"0\"} 1.5\n"
        "penstock_pp_stage_stall_seconds_total{stage=\"1\"} 3.5\n";
    Result<PipelineCounters> a = parse_pipeline_counters(after_text);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ServerStats s;
    ASSERT_TRUE(pipeline_run_stats(*b, *a, &s).ok());
    EXPECT_DOUBLE_EQ(*s.active_s, 4);
    ASSERT_EQ(s.stage_busy_fraction.size(), 2u);
    EXPECT_DOUBLE_EQ(s.stage_busy_fraction[0], 0.75);
    EXPECT_DOUBLE_EQ(s.stage_busy_fraction[1], 0.5);
    EXPECT_EQ(s.stage_stall_s, (std::vector<double>{0.5, 1.0}));
    EXPECT_FALSE(pipeline_run_stats(*a, *b, &s).ok());  // counters went backwards: a restarted server
    // Missing metrics and gaps in the stage labels are errors naming the metric.
    Result<PipelineCounters> none = parse_pipeline_counters("penstock_steps_total 3\n");
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.status().message().find("penstock_pp_active_seconds_total"), std::string::npos);
    EXPECT_FALSE(parse_pipeline_counters("penstock_pp_active_seconds_total 1\n"
                                         "penstock_pp_stage_busy_seconds_total{stage=\"1\"} 1\n"
                                         "penstock_pp_stage_stall_seconds_total{stage=\"1\"} 1\n")
                     .ok());
    EXPECT_FALSE(parse_pipeline_counters("penstock_pp_active_seconds_total 1\n"
                                         "penstock_pp_stage_busy_seconds_total{stage=\"0\"} 1\n")
                     .ok());
}

TEST(SweepReport, GpuProcessMemoryFromNvidiaSmi) {
    const auto m = parse_gpu_process_memory("1234, 80123\n5678, 512\n[N/A], 7\n99, [N/A]\n\n");
    ASSERT_EQ(m.size(), 2u);
    EXPECT_EQ(m[0], (std::pair<int64_t, double>{1234, 80123}));
    EXPECT_EQ(m[1], (std::pair<int64_t, double>{5678, 512}));
    EXPECT_TRUE(parse_gpu_process_memory("No running processes found\n").empty());
    const auto devices = parse_gpu_process_memory("0, 1000\n1, 2000\n");  // --query-gpu=index,memory.used
    ASSERT_EQ(devices.size(), 2u);
    EXPECT_EQ(devices[0], (std::pair<int64_t, double>{0, 1000}));
}

TEST(SweepReport, SummaryTakesElementWiseMediansOfServerStats) {
    std::vector<RunRow> rows = {row("pp2", 8, 1, kRunOk, 1, 1), row("pp2", 8, 2, kRunOk, 1, 1),
                                row("pp2", 8, 3, kRunOk, 1, 1), row("pp2", 8, 4, kRunFailed, 1, 1)};
    const std::vector<std::vector<double>> busy = {{0.9, 0.5}, {0.7, 0.6}, {0.8, 0.4}, {0, 0}};
    for (size_t i = 0; i < rows.size(); ++i) {
        rows[i].server.active_s = 2.0 + static_cast<double>(i);
        rows[i].server.stage_busy_fraction = busy[i];
        rows[i].server.stage_stall_s = {0.1, 0.2 * static_cast<double>(i + 1)};
        rows[i].server.peak_rss_mib = {100.0 * static_cast<double>(i + 1), 50};
    }
    rows[2].server.peak_rss_mib = {7};  // another rank count: that run is left out of that median only
    const std::vector<SummaryRow> s = summarize(rows);
    ASSERT_EQ(s.size(), 1u);
    const ServerStats& m = s[0].server_median;
    EXPECT_DOUBLE_EQ(*m.active_s, 3);  // the failed run (5) is not in the median
    EXPECT_EQ(m.stage_busy_fraction, (std::vector<double>{0.8, 0.5}));
    EXPECT_EQ(m.stage_stall_s, (std::vector<double>{0.1, 0.4}));
    EXPECT_TRUE(m.peak_rss_mib.empty());  // lengths differ among the ok runs: no per-rank median
    EXPECT_TRUE(m.gpu_mem_mib.empty());
}

TEST(SweepReport, MetricsFromBenchSummary) {
    Result<RunMetrics> m = metrics_from_summary_json(R"({"completed": 8, "failed": 0, "duration_s": 1.5,
        "input_throughput_tok_s": 341.3, "output_throughput_tok_s": 5.3,
        "ttft_ms": {"mean": 10, "p50": 9, "p95": 20, "p99": 21, "max": 22},
        "e2e_latency_ms": {"mean": 11, "p50": 10, "p95": 21, "p99": 22, "max": 23}})");
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m->completed, 8);
    EXPECT_DOUBLE_EQ(m->input_tok_s, 341.3);
    EXPECT_DOUBLE_EQ(m->ttft_p95_ms, 20);
    EXPECT_DOUBLE_EQ(m->e2e_p50_ms, 10);
    Result<RunMetrics> bad = metrics_from_summary_json(R"({"completed": 8, "failed": 0})");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("input_throughput_tok_s"), std::string::npos);
    EXPECT_FALSE(metrics_from_summary_json("").ok());
}

TEST(SweepReport, PlotScriptsNameEveryLayout) {
    const fs::path dir = fs::temp_directory_path() / ("sweep_plot_" + std::to_string(::getpid()));
    std::vector<RunRow> rows = {row("pp1", 2, 1, kRunOk, 100, 10), row("pp1", 4, 1, kRunOk, 150, 20),
                                row("pp2", 2, 1, kRunOk, 90, 12), row("pp4", 2, 1, kRunFailed, 1, 1)};
    Result<std::vector<PlotScript>> s = write_plot_files(dir.string(), summarize(rows), "png", "t'x");
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    ASSERT_EQ(s->size(), 2u);  // no pipeline counters: no pipeline plot
    EXPECT_FALSE(fs::exists(dir / "pipeline.gp"));
    std::ifstream gp(dir / "input_tps.gp");
    const std::string text((std::istreambuf_iterator<char>(gp)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("set terminal png"), std::string::npos);
    EXPECT_NE(text.find("'data/pp1.dat'"), std::string::npos);
    EXPECT_NE(text.find("'data/pp2.dat'"), std::string::npos);
    EXPECT_EQ(text.find("pp4"), std::string::npos);  // no ok run, nothing to draw
    EXPECT_NE(text.find("t''x"), std::string::npos);
    std::ifstream dat(dir / "data" / "pp1.dat");
    std::string header, l1, l2;
    std::getline(dat, header);
    std::getline(dat, l1);
    std::getline(dat, l2);
    EXPECT_EQ(l1, "2 100 10 20 NaN NaN");
    EXPECT_EQ(l2, "4 150 20 40 NaN NaN");
    const std::vector<RunRow> none = {row("x", 2, 1, kRunFailed, 1, 1)};
    EXPECT_FALSE(write_plot_files(dir.string(), summarize(none), "png", "t").ok());
    // With pipeline counters: bubble and boundary-stall fractions in the data and a third plot.
    rows[2].server.active_s = 2;
    rows[2].server.stage_busy_fraction = {0.9, 0.7};
    rows[2].server.stage_stall_s = {0, 0.5};
    s = write_plot_files(dir.string(), summarize(rows), "png", "t");
    ASSERT_TRUE(s.ok());
    ASSERT_EQ(s->size(), 3u);
    EXPECT_EQ((*s)[2].png, "pipeline.png");
    std::ifstream pgp(dir / "pipeline.gp");
    const std::string ptext((std::istreambuf_iterator<char>(pgp)), std::istreambuf_iterator<char>());
    EXPECT_NE(ptext.find("'data/pp2.dat' using 1:5"), std::string::npos);
    EXPECT_NE(ptext.find("'data/pp2.dat' using 1:6"), std::string::npos);
    std::ifstream pdat(dir / "data" / "pp2.dat");
    std::getline(pdat, header);
    std::getline(pdat, l1);
    EXPECT_EQ(l1, "2 90 12 24 0.2 0.25");
    fs::remove_all(dir);
}

TEST(SweepProcess, ShellQuote) {
    EXPECT_EQ(shell_quote("--pp"), "--pp");
    EXPECT_EQ(shell_quote("a b"), "'a b'");
    EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
    EXPECT_EQ(shell_quote(""), "''");
}

TEST(SweepProcess, SpawnFailureIsReported) {
    Result<pid_t> pid = spawn_process({.argv = {"/nonexistent/prog"}, .env = {}, .stdout_path = "", .stderr_path = "",
                                       .cwd = ""});
    ASSERT_FALSE(pid.ok());
    EXPECT_NE(pid.status().message().find("cannot run '/nonexistent/prog'"), std::string::npos);
    EXPECT_TRUE(find_program("definitely-not-a-program-xyz").empty());
    EXPECT_FALSE(find_program("sh").empty());
}

TEST(SweepProcess, ExitStatusEnvAndOutput) {
    const fs::path out = fs::temp_directory_path() / ("sweep_proc_" + std::to_string(::getpid()) + ".txt");
    Result<pid_t> pid = spawn_process({.argv = {"sh", "-c", "echo \"$SWEEP_X\"; exit 3"},
                                       .env = {{"SWEEP_X", "hello"}},
                                       .stdout_path = out.string(),
                                       .stderr_path = "",
                                       .cwd = "/"});
    ASSERT_TRUE(pid.ok()) << pid.status().to_string();
    EXPECT_EQ(wait_process(*pid, 10, nullptr), std::optional<int>(3));
    std::ifstream in(out);
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, "hello");
    fs::remove(out);
    EXPECT_EQ(capture_output({"sh", "-c", "echo hi"}, 10), std::optional<std::string>("hi\n"));
    EXPECT_FALSE(capture_output({"sleep", "5"}, 0.2).has_value());
}

TEST(SweepProcess, StopKillsTheWholeTreeIncludingTermIgnoringChildren) {
    become_subreaper();
    // A leader whose children ignore SIGTERM, one of them in its own process group.
    Result<pid_t> pid = spawn_process(
        {.argv = {"sh", "-c",
                  "trap '' TERM; (trap '' TERM; exec sleep 60) & setsid sh -c 'trap \"\" TERM; sleep 60' & wait"},
         .env = {},
         .stdout_path = "",
         .stderr_path = "",
         .cwd = ""});
    ASSERT_TRUE(pid.ok()) << pid.status().to_string();
    std::vector<ProcInfo> tree;
    for (int i = 0; i < 100 && tree.size() < 4; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        tree = process_tree({*pid}, *pid);
    }
    ASSERT_GE(tree.size(), 3u);
    EXPECT_EQ(::getpgid(*pid), *pid) << "the leader heads its own process group";
    for (const ProcInfo& p : tree) EXPECT_GE(p.vm_rss_kb, 0) << p.pid << " " << p.cmdline;
    const auto t0 = std::chrono::steady_clock::now();
    const StopOutcome st = stop_process_tree(*pid, /*grace_s=*/0.5);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 8.0);
    EXPECT_TRUE(st.killed);
    EXPECT_EQ(st.exit_status, 128 + SIGKILL);
    // Gone, or a zombie not yet reaped by the parent it was reparented to: nothing of the tree still runs.
    const std::vector<ProcInfo> after = process_tree({*pid}, *pid);  // lists live (non-zombie) processes only
    for (const ProcInfo& p : tree) {
        for (const ProcInfo& q : after) EXPECT_NE(q.pid, p.pid) << "left behind: " << p.pid << " " << p.cmdline;
        std::ifstream stat("/proc/" + std::to_string(p.pid) + "/stat");
        std::string text;
        std::getline(stat, text);
        const size_t close = text.rfind(')');
        if (close != std::string::npos && close + 2 < text.size()) {
            EXPECT_EQ(text[close + 2], 'Z') << "left behind: " << p.pid << " " << p.cmdline;
        }
    }
    EXPECT_TRUE(process_tree({::getpid()}, 0).size() == 1u) << "only this test process remains";
}

TEST(SweepProcess, MpiRankFromEnvironmentAndPeakReset) {
    Result<pid_t> pid = spawn_process({.argv = {"sleep", "30"},
                                       .env = {{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}},
                                       .stdout_path = "",
                                       .stderr_path = "",
                                       .cwd = ""});
    ASSERT_TRUE(pid.ok());
    std::vector<ProcInfo> tree;
    for (int i = 0; i < 100 && (tree.empty() || tree[0].vm_hwm_kb <= 0); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        tree = process_tree({*pid}, *pid);
    }
    ASSERT_EQ(tree.size(), 1u);
    EXPECT_EQ(tree[0].mpi_rank, 5);
    EXPECT_EQ(tree[0].mpi_local_rank, 1);
    EXPECT_GT(tree[0].vm_hwm_kb, 0);
    EXPECT_TRUE(reset_peak_rss(*pid));  // our own child: /proc/<pid>/clear_refs is writable
    EXPECT_FALSE(reset_peak_rss(999999999));
    // This process has no rank in its environment (unless the test itself runs under mpirun).
    const std::vector<ProcInfo> self = process_tree({::getpid()}, 0);
    for (const ProcInfo& p : self) {
        if (p.pid == ::getpid() && std::getenv("OMPI_COMM_WORLD_RANK") == nullptr) {
            EXPECT_EQ(p.mpi_rank, -1);
        }
    }
    stop_process_tree(*pid, /*grace_s=*/5);
}

TEST(SweepProcess, StopIsGracefulWhenTheServerExitsOnTerm) {
    Result<pid_t> pid =
        spawn_process({.argv = {"sleep", "60"}, .env = {}, .stdout_path = "", .stderr_path = "", .cwd = ""});
    ASSERT_TRUE(pid.ok());
    const StopOutcome st = stop_process_tree(*pid, /*grace_s=*/5);
    EXPECT_FALSE(st.killed);
    EXPECT_EQ(st.exit_status, 128 + SIGTERM);
    EXPECT_EQ(st.n_leftover_killed, 0);
}

}  // namespace
}  // namespace penstock::bench
