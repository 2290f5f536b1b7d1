// `penstock sweep`: drives servers and bench runs for every layout × concurrency × repeat of a matrix file and
// writes the run directories, CSVs and plots. Single-threaded: children are processes (servers in their own group,
// bench as `penstock bench` subprocesses) polled with deadlines that a SIGINT/SIGTERM cuts short.
#include "bench/sweep.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "bench/client.h"
#include "bench/process.h"
#include "bench/sweep_config.h"
#include "bench/sweep_report.h"

namespace penstock::bench {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

void add_sweep_options(CLI::App* cmd, SweepOptions* o) {
    cmd->add_option("config", o->config_path, "sweep matrix file (TOML, see docs/design/bench.md)")->required();
    cmd->add_option("--output-dir", o->output_dir, "override the file's output_dir");
    cmd->add_option("--model", o->model, "override the file's model");
    cmd->add_option("--penstock", o->penstock, "server binary (default: the file's penstock, else this binary)");
    cmd->add_option("--repeats", o->repeats, "override the file's repeats (> 0)");
    cmd->add_option("--num-prompts", o->num_prompts, "override the file's requests per run (> 0)");
    cmd->add_flag("--dry-run", o->dry_run, "print the server and bench commands, run nothing");
    cmd->add_flag("--force", o->force, "write into an output directory that already holds a sweep");
    cmd->add_flag("--resume", o->resume,
                  "continue a sweep cut short in the output directory: keep the layouts whose runs in results.csv are "
                  "all ok, run the others again");
    cmd->add_flag("--report-only", o->report_only,
                  "run nothing: make summary.csv, the plots and sweep.json again from the output directory's "
                  "results.csv (a sweep cut short)");
}

namespace {

// Set from the SIGINT/SIGTERM handler (lock-free atomics are async-signal-safe); the only global mutable state.
std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) {
    g_stop_signal = sig;
    g_stop = true;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_text(const fs::path& p, const std::string& text) {
    std::ofstream out(p, std::ios::binary);
    out << text;
    if (!out) std::fprintf(stderr, "penstock sweep: warning: cannot write %s\n", p.string().c_str());
}

std::string tail_lines(const std::string& text, int n) {
    size_t pos = text.size();
    while (pos > 0 && (text[pos - 1] == '\n' || text[pos - 1] == '\r')) --pos;
    const size_t end = pos;
    for (int k = 0; k < n && pos > 0; ++k) {
        pos = text.rfind('\n', pos - 1);
        if (pos == std::string::npos) {
            pos = 0;
            break;
        }
    }
    std::string t = text.substr(pos, end - pos);
    for (char& c : t) {
        if (c == '\n' || c == '\r') c = ' ';
    }
    while (!t.empty() && t.front() == ' ') t.erase(0, 1);
    return t.size() > 400 ? "..." + t.substr(t.size() - 400) : t;
}

// The line of a server log that explains a failure: penstock's own "error:" line when there is one (mpirun adds
// banners after it), else the last lines.
std::string log_excerpt(const std::string& log) {
    std::istringstream in(log);
    std::string line;
    while (std::getline(in, line)) {
        if (line.find("error:") != std::string::npos || line.find("Error:") != std::string::npos) {
            return line.size() > 400 ? line.substr(0, 400) + "..." : line;
        }
    }
    return tail_lines(log, 4);
}

std::string command_line(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& env = {}) {
    std::string s;
    if (!env.empty()) {
        s = "env";
        for (const auto& [k, v] : env) s += " " + k + "=" + shell_quote(v);
        s += " ";
    }
    for (size_t i = 0; i < argv.size(); ++i) s += (i ? " " : "") + shell_quote(argv[i]);
    return s;
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

// What a layout came to, for sweep.json.
struct LayoutOutcome {
    std::string status = kRunOk;  // kRunOk, or the status its unrun rows got
    std::string error;
    int port = 0;
    double startup_s = 0;
    int server_exit_status = -1;
    bool server_killed = false;
    int leftover_processes_killed = 0;
    json server_info;
};

class Sweep final {
public:
    Sweep(SweepConfig cfg, fs::path out, std::string penstock)
        : cfg_(std::move(cfg)), out_(std::move(out)), penstock_(std::move(penstock)) {
        nvidia_smi_ = find_program("nvidia-smi");
    }

    std::vector<std::string> server_argv(const SweepLayout& l, int port) const {
        std::vector<std::string> a;
        if (l.np() > 1 || cfg_.launcher.always) {
            a = {cfg_.launcher.mpirun, "-np", std::to_string(l.np())};
            a.insert(a.end(), cfg_.launcher.args.begin(), cfg_.launcher.args.end());
        }
        const std::vector<std::string> serve = {penstock_, "serve",  "--model", cfg_.model, "--host",
                                                cfg_.host, "--port", std::to_string(port), "--pp",
                                                std::to_string(l.pp), "--tp", std::to_string(l.tp), "--ep",
                                                std::to_string(l.ep), "--cp", std::to_string(l.cp)};
        a.insert(a.end(), serve.begin(), serve.end());
        if (!l.pp_layer_partition.empty()) {
            a.push_back("--pp-layer-partition");
            a.push_back(l.partition_string());
        }
        a.insert(a.end(), cfg_.server_args.begin(), cfg_.server_args.end());
        a.insert(a.end(), l.args.begin(), l.args.end());
        return a;
    }

    std::vector<std::string> bench_argv(const std::string& url, int64_t c, const fs::path& run_dir) const {
        const SweepBench& b = cfg_.bench;
        std::ostringstream ratio, timeout;
        ratio << b.range_ratio;
        timeout << b.request_timeout_s;
        std::vector<std::string> a = {penstock_,     "bench",
                                      "--base-url",  url,
                                      "--dataset",   b.dataset,
                                      "--input-len", std::to_string(b.input_len),
                                      "--output-len", std::to_string(b.output_len),
                                      "--range-ratio", ratio.str(),
                                      "--num-prompts", std::to_string(b.prompts_for(c)),
                                      "--max-concurrency", std::to_string(c),
                                      "--seed",      std::to_string(b.seed),
                                      "--timeout-s", timeout.str(),
                                      "--output-file", (run_dir / "raw.jsonl").string(),
                                      "--summary-file", (run_dir / "summary.json").string(),
                                      "--quiet"};
        a.insert(a.end(), b.args.begin(), b.args.end());
        return a;
    }

    std::string connect_host() const {
        return cfg_.host == "0.0.0.0" || cfg_.host == "::" || cfg_.host.empty() ? "127.0.0.1" : cfg_.host;
    }

    void dry_run() const {
        for (size_t i = 0; i < cfg_.layouts.size(); ++i) {
            const SweepLayout& l = cfg_.layouts[i];
            const int port = cfg_.port_base > 0 ? cfg_.port_base + static_cast<int>(i) : 0;
            std::printf("# layout %s\n%s\n", l.name.c_str(),
                        command_line(server_argv(l, port), cfg_.launcher.env).c_str());
            const std::string url = "http://" + connect_host() + ":" + (port > 0 ? std::to_string(port) : "PORT");
            for (int64_t c : cfg_.concurrencies) {
                for (int r = 1; r <= cfg_.repeats; ++r) {
                    const fs::path dir = out_ / l.name / ("c" + std::to_string(c) + "_r" + std::to_string(r));
                    std::printf("%s\n", command_line(bench_argv(url, c, dir)).c_str());
                }
            }
        }
    }

    int run(bool resume = false);
    int report();
    int finish();  // summary.csv, plots, sweep.json and the closing line; the exit code

private:
    // The memory snapshot of a phase: VmRSS/VmHWM of every process of the server tree, plus nvidia-smi.
    void snapshot(const fs::path& file, const std::string& phase, pid_t server) const {
        json procs = json::array();
        int64_t rss = 0, hwm = 0;
        if (server > 0) {
            for (const ProcInfo& p : process_tree({server}, server)) {
                procs.push_back({{"pid", p.pid},
                                 {"ppid", p.ppid},
                                 {"pgid", p.pgid},
                                 {"comm", p.comm},
                                 {"cmdline", p.cmdline},
                                 {"vm_rss_kb", p.vm_rss_kb},
                                 {"vm_hwm_kb", p.vm_hwm_kb}});
                rss += std::max<int64_t>(p.vm_rss_kb, 0);
                hwm += std::max<int64_t>(p.vm_hwm_kb, 0);
            }
        }
        json gpu = nullptr;
        if (!nvidia_smi_.empty()) {
            const std::optional<std::string> text = capture_output(
                {nvidia_smi_, "--query-gpu=index,memory.used,memory.total", "--format=csv"}, /*timeout_s=*/20);
            gpu = text ? json(*text) : json("nvidia-smi failed");
        }
        write_text(file, json{{"phase", phase},
                              {"utc", utc_now()},
                              {"processes", procs},
                              {"total_vm_rss_kb", rss},
                              {"total_vm_hwm_kb", hwm},
                              {"nvidia_smi", gpu}}
                                 .dump(2) +
                             "\n");
    }

    void add_row(const SweepLayout& l, size_t layout_index, int64_t c, int r, RunRow row) {
        row.layout = l.name;
        row.pp = l.pp;
        row.tp = l.tp;
        row.ep = l.ep;
        row.cp = l.cp;
        row.partition = partition_[layout_index];
        row.concurrency = c;
        row.repeat = r;
        row.num_prompts = cfg_.bench.prompts_for(c);
        if (row.dir.empty()) row.dir = l.name + "/c" + std::to_string(c) + "_r" + std::to_string(r);
        rows_.push_back(std::move(row));
        save_results();
    }

    // results.csv kept current, so an interrupted sweep keeps it: the rows so far, then (--resume) the kept rows of
    // layouts the loop has not reached yet, which a cut during an earlier layout's rerun must not lose.
    void save_results() const {
        std::vector<RunRow> all = rows_;
        for (const std::vector<RunRow>& k : kept_) all.insert(all.end(), k.begin(), k.end());
        write_text(out_ / "results.csv", results_csv(all));
    }

    // Layout li's /get_server_info answer as its run saved it (server_info.json), where there is one.
    void load_server_info(size_t li) {
        const json info = json::parse(read_text(out_ / cfg_.layouts[li].name / "server_info.json"), nullptr, false);
        if (!info.is_discarded()) outcomes_[li].server_info = info;
    }

    // Rows for every run of layout `li` not yet recorded, all with `status`.
    void fill_rows(size_t li, const std::string& status, const std::string& error) {
        const SweepLayout& l = cfg_.layouts[li];
        for (int64_t c : cfg_.concurrencies) {
            for (int r = 1; r <= cfg_.repeats; ++r) {
                bool have = false;
                for (const RunRow& row : rows_) {
                    have = have || (row.layout == l.name && row.concurrency == c && row.repeat == r);
                }
                if (have) continue;
                RunRow row;
                row.status = status;
                row.error = error;
                add_row(l, li, c, r, std::move(row));
            }
        }
    }

    // The server's MPI ranks (by rank; the server itself as rank 0 when it runs without mpirun).
    std::vector<ProcInfo> rank_processes() const;
    // GET /metrics into `file`, parsed; nullopt (with a warning) when it fails.
    std::optional<PipelineCounters> scrape_pipeline(int port, const fs::path& file) const;
    // Per-rank VmHWM and GPU memory after a run into `stats`, with the details in `file`.
    void rank_memory(const fs::path& file, bool peak_reset, ServerStats* stats) const;
    Status wait_healthy(pid_t pid, const fs::path& dir, LayoutOutcome* o, std::string* status);
    Status verify_layout(size_t li, const fs::path& dir, LayoutOutcome* o);
    RunRow run_one(size_t li, int64_t c, int r, const std::string& url, const fs::path& dir);
    void run_layout(size_t li);
    void draw_plots();
    void write_manifest(int exit_code) const;

    SweepConfig cfg_;
    fs::path out_;
    std::string penstock_;
    std::string nvidia_smi_;
    std::vector<RunRow> rows_;
    std::vector<std::vector<RunRow>> kept_;  // --resume: per layout, its earlier rows until the loop reaches it
    std::vector<std::string> partition_;  // per layout: requested, else as the server reported it
    std::vector<LayoutOutcome> outcomes_;
    pid_t server_pid_ = 0;  // the running layout's launcher (group leader), 0 between layouts
    json plots_ = json::array();
    std::string plot_error_;
};

std::vector<ProcInfo> Sweep::rank_processes() const {
    std::vector<ProcInfo> ranks;
    if (server_pid_ <= 0) return ranks;
    const std::vector<ProcInfo> tree = process_tree({server_pid_}, server_pid_);
    for (const ProcInfo& p : tree) {
        if (p.mpi_rank < 0) continue;
        bool seen = false;
        for (const ProcInfo& q : ranks) seen = seen || q.mpi_rank == p.mpi_rank;
        if (!seen) ranks.push_back(p);  // by pid: a rank's own children (none today) come after it
    }
    if (ranks.empty()) {
        for (ProcInfo p : tree) {
            if (p.pid != server_pid_) continue;
            p.mpi_rank = 0;
            p.mpi_local_rank = 0;
            ranks.push_back(p);
        }
    }
    std::sort(ranks.begin(), ranks.end(), [](const ProcInfo& a, const ProcInfo& b) { return a.mpi_rank < b.mpi_rank; });
    return ranks;
}

std::optional<PipelineCounters> Sweep::scrape_pipeline(int port, const fs::path& file) const {
    int http = 0;
    const std::string body = http_get({.host = connect_host(), .port = port}, "/metrics", /*timeout_s=*/30, &http);
    write_text(file, body);
    Result<PipelineCounters> c = parse_pipeline_counters(body);
    if (http != 200 || !c.ok()) {
        std::fprintf(stderr, "penstock sweep: warning: %s: GET /metrics (HTTP %d): %s\n", file.string().c_str(), http,
                     c.ok() ? "bad status" : c.status().message().c_str());
        return std::nullopt;
    }
    return *c;
}

void Sweep::rank_memory(const fs::path& file, bool peak_reset, ServerStats* stats) const {
    const std::vector<ProcInfo> ranks = rank_processes();
    // GPU memory: per process when nvidia-smi's pids are ours, else per device by local rank (one GPU per rank, GPU =
    // local rank, as the CUDA backend picks it; nvidia-smi inside a container reports host pids).
    std::map<int64_t, double> gpu_by_pid, gpu_by_index;
    std::string gpu_source;
    if (!nvidia_smi_.empty()) {
        const std::optional<std::string> apps =
            capture_output({nvidia_smi_, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"}, 20);
        for (const auto& [pid, mib] : parse_gpu_process_memory(apps.value_or(""))) gpu_by_pid[pid] = mib;
        const std::optional<std::string> devs =
            capture_output({nvidia_smi_, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"}, 20);
        for (const auto& [index, mib] : parse_gpu_process_memory(devs.value_or(""))) gpu_by_index[index] = mib;
    }
    bool by_pid = false;
    for (const ProcInfo& p : ranks) by_pid = by_pid || gpu_by_pid.count(p.pid) != 0;
    json list = json::array();
    std::vector<double> rss, gpu;
    for (const ProcInfo& p : ranks) {
        rss.push_back(static_cast<double>(std::max<int64_t>(p.vm_hwm_kb, 0)) / 1024.0);
        json gpu_mib = nullptr;
        if (by_pid && gpu_by_pid.count(p.pid) != 0) {
            gpu_mib = gpu_by_pid[p.pid];
        } else if (!by_pid && gpu_by_index.count(p.mpi_local_rank) != 0) {
            gpu_mib = gpu_by_index[p.mpi_local_rank];
        }
        if (!gpu_mib.is_null()) gpu.push_back(gpu_mib.get<double>());
        list.push_back({{"rank", p.mpi_rank},
                        {"local_rank", p.mpi_local_rank},
                        {"pid", p.pid},
                        {"vm_rss_kb", p.vm_rss_kb},
                        {"vm_hwm_kb", p.vm_hwm_kb},
                        {"gpu_used_mib", gpu_mib}});
    }
    stats->peak_rss_mib = rss;
    // A per-rank vector only when every rank has a value (so that position = rank).
    stats->gpu_mem_mib = gpu.size() == ranks.size() ? gpu : std::vector<double>{};
    if (!gpu.empty()) gpu_source = by_pid ? "nvidia-smi per process" : "nvidia-smi per device (GPU = local rank)";
    write_text(file, json{{"utc", utc_now()},
                          {"vm_hwm_since", peak_reset ? "start of the run" : "start of the process"},
                          {"gpu_source", gpu_source},
                          {"ranks", list}}
                             .dump(2) +
                         "\n");
}

Status Sweep::wait_healthy(pid_t pid, const fs::path& dir, LayoutOutcome* o, std::string* status) {
    const Clock::time_point t0 = Clock::now();
    const std::regex listening(R"(listening on http://[^\s:/]+:(\d+))");
    while (true) {
        if (g_stop) {
            *status = kRunInterrupted;
            return Status(StatusCode::kCancelled, "interrupted while waiting for the server");
        }
        if (const std::optional<int> st = poll_process(pid)) {
            o->server_exit_status = *st;
            *status = kRunServerStartFailed;
            return failed_precondition("server exited with status " + std::to_string(*st) +
                                       " before /health answered; stderr: " +
                                       log_excerpt(read_text(dir / "server.stderr.log")));
        }
        if (o->port == 0) {
            std::smatch m;
            const std::string log = read_text(dir / "server.stdout.log");
            if (std::regex_search(log, m, listening)) o->port = std::stoi(m[1].str());
        }
        if (o->port > 0) {
            int http = 0;
            http_get({.host = connect_host(), .port = o->port}, "/health", /*timeout_s=*/5, &http);
            if (http == 200) {
                o->startup_s = seconds_since(t0);
                return ok_status();
            }
        }
        if (seconds_since(t0) > cfg_.timeouts.server_start_s) {
            *status = kRunServerStartTimeout;
            std::ostringstream msg;
            msg << "server not healthy after " << cfg_.timeouts.server_start_s
                << " s (timeouts.server_start_s); stderr: " << log_excerpt(read_text(dir / "server.stderr.log"));
            return Status(StatusCode::kDeadlineExceeded, msg.str());
        }
        // The last probe falls just past the deadline, not up to 100 ms after it: a server that became healthy
        // only after timeouts.server_start_s is a timeout, however short the setting.
        const double left_s = cfg_.timeouts.server_start_s - seconds_since(t0);
        std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp(left_s + 0.001, 0.001, 0.1)));
    }
}

// The partition the server reports, as "a,b,c" ("" when it reports none).
std::string reported_partition(const json& info) {
    for (const char* key : {"pp_layer_partition", "partition", "pp_partition"}) {
        if (!info.contains(key)) continue;
        const json& v = info[key];
        if (v.is_string()) return v.get<std::string>();
        if (v.is_array()) {
            std::string s;
            for (const json& e : v) {
                if (!s.empty()) s.push_back(',');
                s += e.is_number_integer() ? std::to_string(e.get<int64_t>()) : e.dump();
            }
            return s;
        }
    }
    return "";
}

Status Sweep::verify_layout(size_t li, const fs::path& dir, LayoutOutcome* o) {
    const SweepLayout& l = cfg_.layouts[li];
    int http = 0;
    const std::string body = http_get({.host = connect_host(), .port = o->port}, "/get_server_info", 30, &http);
    write_text(dir / "server_info.json", body + "\n");
    const json info = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (http != 200 || !info.is_object()) {
        return failed_precondition("GET /get_server_info failed (HTTP " + std::to_string(http) + ")");
    }
    o->server_info = info;
    std::string mismatch;
    const std::pair<const char*, int> want[] = {{"pp_size", l.pp}, {"tp_size", l.tp}, {"ep_size", l.ep},
                                                {"cp_size", l.cp}};
    for (const auto& [key, value] : want) {
        if (!info.contains(key) || !info[key].is_number_integer()) {
            mismatch += std::string(mismatch.empty() ? "" : "; ") + "server reports no " + key;
        } else if (info[key].get<int64_t>() != value) {
            mismatch += std::string(mismatch.empty() ? "" : "; ") + "requested " + key + "=" + std::to_string(value) +
                        ", server reports " + std::to_string(info[key].get<int64_t>());
        }
    }
    const std::string reported = reported_partition(info);
    if (!l.pp_layer_partition.empty() && reported != l.partition_string()) {
        mismatch += std::string(mismatch.empty() ? "" : "; ") + "requested pp_layer_partition " +
                    l.partition_string() + ", server reports " + (reported.empty() ? "none" : reported);
    }
    if (l.pp_layer_partition.empty()) partition_[li] = reported;
    if (!mismatch.empty()) return failed_precondition("effective layout differs: " + mismatch);
    return ok_status();
}

RunRow Sweep::run_one(size_t li, int64_t c, int r, const std::string& url, const fs::path& layout_dir) {
    const SweepLayout& l = cfg_.layouts[li];
    const fs::path dir = layout_dir / ("c" + std::to_string(c) + "_r" + std::to_string(r));
    std::error_code ec;
    fs::create_directories(dir, ec);
    const std::vector<std::string> argv = bench_argv(url, c, dir);
    write_text(dir / "command.txt", "# server (one per layout, logs in ../server.*.log)\n" +
                                        read_text(layout_dir / "server_command.txt") + "# bench\n" +
                                        command_line(argv) + "\n");
    RunRow row;
    const int64_t n = cfg_.bench.prompts_for(c);
    // Server side: the step executor's counters before and after the run (their difference is this run's), and each
    // rank's peak RSS reset so that the VmHWM read after the run is this run's peak.
    const int port = outcomes_[li].port;
    const std::optional<PipelineCounters> before = scrape_pipeline(port, dir / "metrics_before.prom");
    bool peak_reset = true;
    for (const ProcInfo& p : rank_processes()) peak_reset = reset_peak_rss(p.pid) && peak_reset;
    Result<pid_t> pid = spawn_process({.argv = argv,
                                       .env = {},
                                       .stdout_path = (dir / "bench.log").string(),
                                       .stderr_path = (dir / "bench.stderr.log").string(),
                                       .cwd = ""});
    if (!pid.ok()) {
        row.status = kRunBenchError;
        row.error = pid.status().message();
        return row;
    }
    const std::optional<int> st = wait_process(*pid, cfg_.timeouts.run_s, &g_stop);
    if (!st) {
        stop_process_tree(*pid, /*grace_s=*/2);
        row.status = g_stop ? kRunInterrupted : kRunTimeout;
        std::ostringstream msg;
        if (g_stop) {
            msg << "interrupted by signal " << g_stop_signal.load();
        } else {
            msg << "bench ran past timeouts.run_s = " << cfg_.timeouts.run_s << " s";
        }
        row.error = msg.str();
    }
    Result<RunMetrics> m = metrics_from_summary_json(read_text(dir / "summary.json"));
    if (m.ok()) row.metrics = *m;
    if (st) {
        const std::string first_error = [&] {
            const std::string log = read_text(dir / "bench.log");
            const size_t at = log.find("first error: ");
            return at == std::string::npos ? std::string() : log.substr(at + 13, log.find('\n', at) - at - 13);
        }();
        if (!m.ok()) {
            row.status = kRunBenchError;
            row.error = "bench exited with status " + std::to_string(*st) + " and no usable summary (" +
                        m.status().message() + "); " + tail_lines(read_text(dir / "bench.stderr.log"), 3);
        } else if (*st == 0 && m->completed == n && m->failed == 0) {
            row.status = kRunOk;
        } else {
            row.status = kRunFailed;
            row.error = std::to_string(m->completed) + "/" + std::to_string(n) + " completed, " +
                        std::to_string(m->failed) + " failed, bench exit " + std::to_string(*st) +
                        (first_error.empty() ? "" : "; first error: " + first_error);
        }
    }
    if (const std::optional<PipelineCounters> after = scrape_pipeline(port, dir / "metrics_after.prom");
        before && after) {
        const Status st = pipeline_run_stats(*before, *after, &row.server);
        if (!st.ok())
            std::fprintf(stderr, "penstock sweep: warning: %s: %s\n", dir.string().c_str(), st.message().c_str());
    }
    rank_memory(dir / "memory_ranks.json", peak_reset, &row.server);
    snapshot(dir / "memory.json", "done", server_pid_);
    std::printf("[sweep] %s c=%lld r=%d: %s", l.name.c_str(), static_cast<long long>(c), r, row.status.c_str());
    if (row.metrics) {
        std::printf(", %lld/%lld, input %.1f tok/s, TTFT p50 %.1f ms p95 %.1f ms",
                    static_cast<long long>(row.metrics->completed), static_cast<long long>(n),
                    row.metrics->input_tok_s, row.metrics->ttft_p50_ms, row.metrics->ttft_p95_ms);
    }
    if (const std::optional<double> bubble = row.server.bubble_fraction_mean()) {
        std::printf(", bubble %.2f, boundary stall %.2f s", *bubble, row.server.boundary_stall_s().value_or(0));
    }
    if (!row.server.peak_rss_mib.empty()) {
        std::printf(", peak RSS %.0f MiB/rank max",
                    *std::max_element(row.server.peak_rss_mib.begin(), row.server.peak_rss_mib.end()));
    }
    std::printf("%s%s\n", row.error.empty() ? "" : ": ", row.error.c_str());
    std::fflush(stdout);
    return row;
}


void Sweep::run_layout(size_t li) {
    const SweepLayout& l = cfg_.layouts[li];
    LayoutOutcome& o = outcomes_[li];
    const fs::path dir = out_ / l.name;
    std::error_code ec;
    fs::create_directories(dir, ec);
    snapshot(dir / "memory_start.json", "start", 0);
    o.port = cfg_.port_base > 0 ? cfg_.port_base + static_cast<int>(li) : 0;
    const std::vector<std::string> argv = server_argv(l, o.port);
    write_text(dir / "server_command.txt", command_line(argv, cfg_.launcher.env) + "\n");
    std::printf("[sweep] layout %s (np %d): starting servers\n", l.name.c_str(), l.np());
    std::fflush(stdout);
    Result<pid_t> pid = spawn_process({.argv = argv,
                                       .env = cfg_.launcher.env,
                                       .stdout_path = (dir / "server.stdout.log").string(),
                                       .stderr_path = (dir / "server.stderr.log").string(),
                                       .cwd = ""});
    if (!pid.ok()) {
        o.status = kRunServerStartFailed;
        o.error = pid.status().message();
    } else {
        server_pid_ = *pid;
        std::string status;
        Status st = wait_healthy(*pid, dir, &o, &status);
        if (st.ok()) {
            st = verify_layout(li, dir, &o);
            status = kRunLayoutMismatch;
        }
        if (!st.ok()) {
            o.status = status;
            o.error = st.message();
        } else {
            snapshot(dir / "memory_healthy.json", "healthy", *pid);
            std::printf("[sweep] layout %s: healthy on port %d after %.1f s, layout verified\n", l.name.c_str(),
                        o.port, o.startup_s);
            const std::string url = "http://" + connect_host() + ":" + std::to_string(o.port);
            for (int64_t c : cfg_.concurrencies) {
                for (int r = 1; r <= cfg_.repeats && o.status == kRunOk; ++r) {
                    if (g_stop) {
                        o.status = kRunInterrupted;
                        o.error = "interrupted by signal " + std::to_string(g_stop_signal.load());
                        break;
                    }
                    if (const std::optional<int> exited = poll_process(*pid)) {
                        o.server_exit_status = *exited;
                        o.status = kRunServerDied;
                        o.error = "server exited with status " + std::to_string(*exited) + "; stderr: " +
                                  log_excerpt(read_text(dir / "server.stderr.log"));
                        break;
                    }
                    add_row(l, li, c, r, run_one(li, c, r, url, dir));
                }
            }
        }
        std::printf("[sweep] layout %s: stopping servers\n", l.name.c_str());
        std::fflush(stdout);
        const StopOutcome stop = stop_process_tree(*pid, cfg_.timeouts.stop_grace_s);
        if (o.server_exit_status < 0) o.server_exit_status = stop.exit_status;
        o.server_killed = stop.killed;
        o.leftover_processes_killed = stop.n_leftover_killed;
        server_pid_ = 0;
        snapshot(dir / "memory_cleaned.json", "cleaned", *pid);
    }
    if (o.status != kRunOk) {
        std::printf("[sweep] layout %s: %s: %s\n", l.name.c_str(), o.status.c_str(), o.error.c_str());
        fill_rows(li, o.status, o.error);
    }
    write_text(dir / "layout.json", json{{"layout", l.name},
                                         {"pp", l.pp},
                                         {"tp", l.tp},
                                         {"ep", l.ep},
                                         {"cp", l.cp},
                                         {"np", l.np()},
                                         {"pp_layer_partition", partition_[li]},
                                         {"status", o.status},
                                         {"error", o.error},
                                         {"port", o.port},
                                         {"startup_s", o.startup_s},
                                         {"server_exit_status", o.server_exit_status},
                                         {"server_killed", o.server_killed},
                                         {"leftover_processes_killed", o.leftover_processes_killed}}
                                            .dump(2) +
                                        "\n");
}

bool is_png(const fs::path& p) {
    static constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const std::string head = read_text(p).substr(0, 8);
    return head.size() == 8 && std::equal(head.begin(), head.end(), kSignature,
                                          [](char a, unsigned char b) { return static_cast<unsigned char>(a) == b; });
}

void Sweep::draw_plots() {
    const fs::path dir = out_ / "plots";
    std::ostringstream title;
    title << fs::path(cfg_.source).stem().string() << " (input " << cfg_.bench.input_len << ", output "
          << cfg_.bench.output_len << ", median of " << cfg_.repeats << ")";
    const std::string gnuplot = find_program(cfg_.plots.gnuplot);
    std::string terminal = cfg_.plots.terminal;
    for (int attempt = 0; attempt < 2; ++attempt) {
        Result<std::vector<PlotScript>> scripts = write_plot_files(dir.string(), summarize(rows_), terminal,
                                                                   title.str());
        if (!scripts.ok()) {
            plot_error_ = scripts.status().message();
            return;
        }
        if (gnuplot.empty()) {
            plot_error_ = "'" + cfg_.plots.gnuplot + "' not found; the .gp scripts are in " + dir.string();
            return;
        }
        plot_error_.clear();
        plots_ = json::array();
        for (const PlotScript& s : *scripts) {
            fs::remove(dir / s.png);
            Result<pid_t> pid = spawn_process({.argv = {gnuplot, s.script},
                                               .env = {},
                                               .stdout_path = (dir / "gnuplot.log").string(),
                                               .stderr_path = (dir / (s.script + ".log")).string(),
                                               .cwd = dir.string()});
            const std::optional<int> st = pid.ok() ? wait_process(*pid, 60, nullptr) : std::nullopt;
            if (pid.ok() && !st) stop_process_tree(*pid, 0);
            if (st && *st == 0 && is_png(dir / s.png)) {
                plots_.push_back("plots/" + s.png);
            } else if (plot_error_.empty()) {
                plot_error_ = "gnuplot " + s.script + " (terminal " + terminal + ") failed: " +
                              tail_lines(read_text(dir / (s.script + ".log")), 2);
            }
        }
        if (plot_error_.empty() || terminal == "png") return;
        terminal = "png";  // pngcairo missing from this gnuplot build: the libgd terminal
    }
}

void Sweep::write_manifest(int exit_code) const {
    json layouts = json::array();
    for (size_t i = 0; i < cfg_.layouts.size(); ++i) {
        layouts.push_back({{"layout", cfg_.layouts[i].name},
                           {"status", outcomes_[i].status},
                           {"error", outcomes_[i].error},
                           {"server_info", outcomes_[i].server_info}});
    }
    int ok = 0;
    for (const RunRow& r : rows_) ok += r.status == kRunOk ? 1 : 0;
    write_text(out_ / "sweep.json",
               json{{"config", cfg_.source},
                    {"repeats", cfg_.repeats},
                    {"num_prompts_per_run", cfg_.bench.num_prompts > 0
                                                ? json(cfg_.bench.num_prompts)
                                                : json("C x " + std::to_string(cfg_.bench.prompts_per_concurrency))},
                    {"model", cfg_.model},
                    {"penstock", penstock_},
                    {"finished_utc", utc_now()},
                    {"runs", rows_.size()},
                    {"ok_runs", ok},
                    {"layouts", layouts},
                    {"plots", plots_},
                    {"plot_error", plot_error_},
                    {"exit_code", exit_code}}
                       .dump(2) +
                   "\n");
}

int Sweep::run(bool resume) {
    partition_.resize(cfg_.layouts.size());
    outcomes_.resize(cfg_.layouts.size());
    for (size_t i = 0; i < cfg_.layouts.size(); ++i) partition_[i] = cfg_.layouts[i].partition_string();
    // --resume: a layout whose every (concurrency, repeat) run is in the earlier results.csv and ok is kept as it is;
    // the others (cut short, failed, or new to the matrix) run again from their server start.
    kept_.assign(cfg_.layouts.size(), {});
    if (resume && fs::exists(out_ / "results.csv")) {
        Result<std::vector<RunRow>> earlier = parse_results_csv(read_text(out_ / "results.csv"));
        if (!earlier.ok()) {
            std::fprintf(stderr, "penstock sweep: error: --resume: %s: %s\n", (out_ / "results.csv").string().c_str(),
                         earlier.status().message().c_str());
            return 2;
        }
        for (size_t i = 0; i < cfg_.layouts.size(); ++i) {
            std::vector<RunRow> mine;
            for (const RunRow& r : *earlier) {
                if (r.layout == cfg_.layouts[i].name) mine.push_back(r);
            }
            bool complete = true;
            for (int64_t c : cfg_.concurrencies) {
                for (int rep = 1; rep <= cfg_.repeats; ++rep) {
                    bool ok = false;
                    for (const RunRow& r : mine) {
                        ok = ok || (r.concurrency == c && r.repeat == rep && r.status == kRunOk &&
                                    r.num_prompts == cfg_.bench.prompts_for(c));
                    }
                    complete = complete && ok;
                }
            }
            if (complete) kept_[i] = std::move(mine);
        }
    }
    save_results();
    for (size_t i = 0; i < cfg_.layouts.size(); ++i) {
        if (!kept_[i].empty()) {
            std::printf("[sweep] layout %s: kept, its %zu runs in the earlier results.csv are ok\n",
                        cfg_.layouts[i].name.c_str(), kept_[i].size());
            load_server_info(i);
            for (RunRow& r : kept_[i]) rows_.push_back(std::move(r));
            kept_[i].clear();
            save_results();
            continue;
        }
        if (g_stop) {
            outcomes_[i].status = kRunInterrupted;
            outcomes_[i].error = "interrupted by signal " + std::to_string(g_stop_signal.load());
            fill_rows(i, outcomes_[i].status, outcomes_[i].error);
            continue;
        }
        run_layout(i);
    }
    return finish();
}

// The layouts' outcomes from the rows results.csv holds (a layout is ok when every row of it is, else it takes its
// first other row's status and error) and their server_info.json, then the summary, plots and manifest as after a
// run.
int Sweep::report() {
    Result<std::vector<RunRow>> rows = parse_results_csv(read_text(out_ / "results.csv"));
    if (!rows.ok()) {
        std::fprintf(stderr, "penstock sweep: error: %s: %s\n", (out_ / "results.csv").string().c_str(),
                     rows.status().message().c_str());
        return 2;
    }
    rows_ = std::move(rows).value();
    outcomes_.assign(cfg_.layouts.size(), LayoutOutcome{});
    for (size_t i = 0; i < cfg_.layouts.size(); ++i) load_server_info(i);
    for (const RunRow& r : rows_) {
        for (size_t i = 0; i < cfg_.layouts.size(); ++i) {
            if (cfg_.layouts[i].name != r.layout || r.status == kRunOk || outcomes_[i].status != kRunOk) continue;
            outcomes_[i].status = r.status;
            outcomes_[i].error = r.error;
        }
    }
    return finish();
}

int Sweep::finish() {
    const std::vector<SummaryRow> summary = summarize(rows_);
    write_text(out_ / "summary.csv", summary_csv(summary));
    if (cfg_.plots.enabled) draw_plots();
    if (!plot_error_.empty()) std::fprintf(stderr, "penstock sweep: warning: plots: %s\n", plot_error_.c_str());
    int ok = 0;
    for (const RunRow& r : rows_) ok += r.status == kRunOk ? 1 : 0;
    int exit_code = ok == static_cast<int>(rows_.size()) ? 0 : 1;
    if (cfg_.plots.enabled && cfg_.plots.required && !plot_error_.empty()) exit_code = 1;
    if (g_stop) exit_code = 128 + g_stop_signal.load();
    write_manifest(exit_code);
    std::printf("[sweep] %d/%zu runs ok; results %s, summary %s", ok, rows_.size(),
                (out_ / "results.csv").string().c_str(), (out_ / "summary.csv").string().c_str());
    for (const json& p : plots_) std::printf(", %s", (out_ / p.get<std::string>()).string().c_str());
    std::printf("\n");
    return exit_code;
}

// Restores the previous SIGINT/SIGTERM/SIGPIPE dispositions when the sweep returns.
class SignalScope final {
public:
    SignalScope() {
        struct sigaction sa {};
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        ::sigaction(SIGINT, &sa, &old_int_);
        ::sigaction(SIGTERM, &sa, &old_term_);
        struct sigaction ignore {};
        ignore.sa_handler = SIG_IGN;
        ::sigaction(SIGPIPE, &ignore, &old_pipe_);
    }
    ~SignalScope() {
        ::sigaction(SIGINT, &old_int_, nullptr);
        ::sigaction(SIGTERM, &old_term_, nullptr);
        ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    }
    SignalScope(const SignalScope&) = delete;
    SignalScope& operator=(const SignalScope&) = delete;

private:
    struct sigaction old_int_ {}, old_term_ {}, old_pipe_ {};
};

}  // namespace

int run_sweep(const SweepOptions& opts) {
    Result<SweepConfig> cfg = load_sweep_config(opts.config_path);
    if (!cfg.ok()) {
        std::fprintf(stderr, "penstock sweep: error: %s\n", cfg.status().message().c_str());
        return 2;
    }
    if (!opts.output_dir.empty()) cfg->output_dir = opts.output_dir;
    if (!opts.model.empty()) cfg->model = opts.model;
    if (!opts.penstock.empty()) cfg->penstock = opts.penstock;
    if (opts.resume && opts.report_only) {
        std::fprintf(stderr, "penstock sweep: error: --resume and --report-only exclude each other\n");
        return 2;
    }
    if (opts.repeats < 0 || opts.num_prompts < 0) {
        std::fprintf(stderr, "penstock sweep: error: --repeats and --num-prompts must be > 0\n");
        return 2;
    }
    if (opts.repeats > 0) cfg->repeats = opts.repeats;
    if (opts.num_prompts > 0) {
        cfg->bench.num_prompts = opts.num_prompts;
        cfg->bench.prompts_per_concurrency = 0;
    }
    std::error_code ec;
    // Absolute model path in the recorded commands, so that they replay from any directory.
    if (fs::exists(cfg->model, ec)) cfg->model = fs::absolute(cfg->model, ec).lexically_normal().string();
    std::string penstock = cfg->penstock;
    if (penstock.empty()) penstock = fs::read_symlink("/proc/self/exe", ec).string();
    if (penstock.empty() || find_program(penstock).empty()) {
        std::fprintf(stderr, "penstock sweep: error: server binary '%s' is not an executable\n", penstock.c_str());
        return 2;
    }
    penstock = find_program(penstock);
    const fs::path out = fs::absolute(cfg->output_dir, ec);
    Sweep sweep(*cfg, out, penstock);
    if (opts.dry_run) {
        sweep.dry_run();
        return 0;
    }
    if (opts.report_only) {
        if (!fs::exists(out / "results.csv")) {
            std::fprintf(stderr, "penstock sweep: error: --report-only: %s holds no results.csv\n",
                         out.string().c_str());
            return 2;
        }
        return sweep.report();
    }
    if (fs::exists(out / "results.csv") && !opts.force && !opts.resume) {
        std::fprintf(stderr,
                     "penstock sweep: error: %s already holds a sweep (results.csv); choose another output_dir or "
                     "pass --force\n",
                     out.string().c_str());
        return 2;
    }
    fs::create_directories(out, ec);
    if (ec) {
        std::fprintf(stderr, "penstock sweep: error: cannot create %s: %s\n", out.string().c_str(),
                     ec.message().c_str());
        return 2;
    }
    fs::copy_file(opts.config_path, out / "sweep.toml", fs::copy_options::overwrite_existing, ec);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines reach a pipe or log as they happen
    g_stop = false;
    g_stop_signal = 0;
    const SignalScope signals;
    become_subreaper();
    return sweep.run(opts.resume);
}

}  // namespace penstock::bench
