// Sweep results: summary-JSON intake, medians, CSV rendering and gnuplot scripts.
#include "bench/sweep_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace penstock::bench {

using json = nlohmann::json;
namespace fs = std::filesystem;

Result<RunMetrics> metrics_from_summary_json(const std::string& text) {
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return invalid_argument("bench summary is not a JSON object");
    RunMetrics m;
    const auto number = [&](const json& obj, const char* key, double* out) -> Status {
        if (!obj.is_object() || !obj.contains(key) || !obj[key].is_number()) {
            return invalid_argument(std::string("bench summary has no number '") + key + "'");
        }
        *out = obj[key].get<double>();
        return ok_status();
    };
    double completed = 0, failed = 0;
    PENSTOCK_RETURN_IF_ERROR(number(j, "completed", &completed));
    PENSTOCK_RETURN_IF_ERROR(number(j, "failed", &failed));
    m.completed = static_cast<int64_t>(completed);
    m.failed = static_cast<int64_t>(failed);
    PENSTOCK_RETURN_IF_ERROR(number(j, "input_throughput_tok_s", &m.input_tok_s));
    PENSTOCK_RETURN_IF_ERROR(number(j, "output_throughput_tok_s", &m.output_tok_s));
    PENSTOCK_RETURN_IF_ERROR(number(j, "duration_s", &m.duration_s));
    const json ttft = j.value("ttft_ms", json());
    PENSTOCK_RETURN_IF_ERROR(number(ttft, "mean", &m.ttft_mean_ms));
    PENSTOCK_RETURN_IF_ERROR(number(ttft, "p50", &m.ttft_p50_ms));
    PENSTOCK_RETURN_IF_ERROR(number(ttft, "p95", &m.ttft_p95_ms));
    PENSTOCK_RETURN_IF_ERROR(number(ttft, "p99", &m.ttft_p99_ms));
    PENSTOCK_RETURN_IF_ERROR(number(j.value("e2e_latency_ms", json()), "p50", &m.e2e_p50_ms));
    return m;
}

std::optional<double> ServerStats::busy_fraction_mean() const {
    if (stage_busy_fraction.empty()) return std::nullopt;
    double sum = 0;
    for (double b : stage_busy_fraction) sum += b;
    return sum / static_cast<double>(stage_busy_fraction.size());
}

std::optional<double> ServerStats::busy_fraction_min() const {
    if (stage_busy_fraction.empty()) return std::nullopt;
    return *std::min_element(stage_busy_fraction.begin(), stage_busy_fraction.end());
}

std::optional<double> ServerStats::bubble_fraction_mean() const {
    const std::optional<double> busy = busy_fraction_mean();
    if (!busy) return std::nullopt;
    return 1.0 - *busy;
}

std::optional<double> ServerStats::boundary_stall_s() const {
    if (stage_stall_s.empty()) return std::nullopt;
    double sum = 0;
    for (size_t s = 1; s < stage_stall_s.size(); ++s) sum += stage_stall_s[s];
    return sum;
}

std::optional<double> ServerStats::boundary_stall_fraction() const {
    const std::optional<double> stall = boundary_stall_s();
    if (!stall || !active_s) return std::nullopt;
    const double boundaries = static_cast<double>(stage_stall_s.size() - 1);
    if (boundaries == 0) return 0.0;
    if (*active_s <= 0) return std::nullopt;
    return *stall / (*active_s * boundaries);
}

namespace {

// The value of a sample line `name{stage="s"} v` or `name v`; false when the line is another metric.
bool sample_value(const std::string& line, const std::string& name, std::optional<int>* stage, double* value) {
    if (line.compare(0, name.size(), name) != 0 || line.size() == name.size()) return false;
    size_t pos = name.size();
    stage->reset();
    if (line[pos] == '{') {
        const size_t close = line.find('}', pos);
        if (close == std::string::npos) return false;
        const std::string labels = line.substr(pos + 1, close - pos - 1);
        const std::string key = "stage=\"";
        const size_t at = labels.find(key);
        if (at == std::string::npos) return false;
        char* end = nullptr;
        const long s = std::strtol(labels.c_str() + at + key.size(), &end, 10);
        if (end == labels.c_str() + at + key.size() || *end != '"' || s < 0 || s > 4096) return false;
        *stage = static_cast<int>(s);
        pos = close + 1;
    }
    if (pos >= line.size() || line[pos] != ' ') return false;
    char* end = nullptr;
    *value = std::strtod(line.c_str() + pos + 1, &end);
    return end != line.c_str() + pos + 1;
}

}  // namespace

Result<PipelineCounters> parse_pipeline_counters(const std::string& text) {
    constexpr const char* kActive = "penstock_pp_active_seconds_total";
    constexpr const char* kBusy = "penstock_pp_stage_busy_seconds_total";
    constexpr const char* kStall = "penstock_pp_stage_stall_seconds_total";
    PipelineCounters c;
    bool have_active = false;
    std::map<int, double> busy, stall;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::optional<int> stage;
        double v = 0;
        if (sample_value(line, kActive, &stage, &v) && !stage) {
            c.active_s = v;
            have_active = true;
        } else if (sample_value(line, kBusy, &stage, &v) && stage) {
            busy[*stage] = v;
        } else if (sample_value(line, kStall, &stage, &v) && stage) {
            stall[*stage] = v;
        }
    }
    if (!have_active) return invalid_argument(std::string("/metrics has no ") + kActive);
    if (busy.empty()) return invalid_argument(std::string("/metrics has no ") + kBusy);
    for (const auto* m : {&busy, &stall}) {
        if (m->size() != busy.size() || m->rbegin()->first != static_cast<int>(busy.size()) - 1) {
            return invalid_argument(std::string("/metrics: the stage labels of ") + kBusy + " and " + kStall +
                                    " are not the same 0..P-1");
        }
    }
    for (const auto& [s, v] : busy) c.busy_s.push_back(v);
    for (const auto& [s, v] : stall) c.stall_s.push_back(v);
    return c;
}

Status pipeline_run_stats(const PipelineCounters& before, const PipelineCounters& after, ServerStats* out) {
    if (before.busy_s.size() != after.busy_s.size() || before.stall_s.size() != after.stall_s.size()) {
        return failed_precondition("the stage count changed between the /metrics scrapes");
    }
    const double active = after.active_s - before.active_s;
    if (active < 0) return failed_precondition("penstock_pp_active_seconds_total went backwards");
    out->active_s = active;
    out->stage_busy_fraction.clear();
    out->stage_stall_s.clear();
    for (size_t s = 0; s < after.busy_s.size(); ++s) {
        const double busy = after.busy_s[s] - before.busy_s[s];
        const double stall = after.stall_s[s] - before.stall_s[s];
        if (busy < 0 || stall < 0) return failed_precondition("a stage counter went backwards");
        out->stage_busy_fraction.push_back(active > 0 ? busy / active : 0.0);
        out->stage_stall_s.push_back(stall);
    }
    return ok_status();
}

std::vector<std::pair<int64_t, double>> parse_gpu_process_memory(const std::string& text) {
    std::vector<std::pair<int64_t, double>> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        const size_t comma = line.find(',');
        if (comma == std::string::npos) continue;
        char* end = nullptr;
        const long long id = std::strtoll(line.c_str(), &end, 10);
        if (end == line.c_str() || id < 0) continue;
        const char* mib_text = line.c_str() + comma + 1;
        const double mib = std::strtod(mib_text, &end);
        if (end == mib_text) continue;  // "[N/A]" and the like
        out.emplace_back(static_cast<int64_t>(id), mib);
    }
    return out;
}

std::optional<double> median(std::vector<double> v) {
    if (v.empty()) return std::nullopt;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

namespace {

// Element-wise median of the vectors selected by `field` among runs that measured it; empty unless all such vectors
// have the same length.
std::vector<double> median_vector(const std::vector<const ServerStats*>& runs,
                                  std::vector<double> ServerStats::*field) {
    std::vector<const std::vector<double>*> have;
    for (const ServerStats* r : runs) {
        if (!(r->*field).empty()) have.push_back(&(r->*field));
    }
    if (have.empty()) return {};
    const size_t n = have[0]->size();
    for (const std::vector<double>* v : have) {
        if (v->size() != n) return {};
    }
    std::vector<double> out;
    for (size_t i = 0; i < n; ++i) {
        std::vector<double> col;
        for (const std::vector<double>* v : have) col.push_back((*v)[i]);
        out.push_back(*median(std::move(col)));
    }
    return out;
}

ServerStats median_server_stats(const std::vector<const ServerStats*>& runs) {
    ServerStats m;
    std::vector<double> active;
    for (const ServerStats* r : runs) {
        if (r->active_s) active.push_back(*r->active_s);
    }
    m.active_s = median(std::move(active));
    m.stage_busy_fraction = median_vector(runs, &ServerStats::stage_busy_fraction);
    m.stage_stall_s = median_vector(runs, &ServerStats::stage_stall_s);
    m.peak_rss_mib = median_vector(runs, &ServerStats::peak_rss_mib);
    m.gpu_mem_mib = median_vector(runs, &ServerStats::gpu_mem_mib);
    return m;
}

}  // namespace

std::vector<SummaryRow> summarize(const std::vector<RunRow>& rows) {
    std::vector<SummaryRow> out;
    std::map<std::pair<std::string, int64_t>, std::vector<const RunRow*>> groups;
    for (const RunRow& r : rows) {
        auto& g = groups[{r.layout, r.concurrency}];
        if (g.empty()) {
            out.push_back({.layout = r.layout,
                           .pp = r.pp,
                           .tp = r.tp,
                           .ep = r.ep,
                           .cp = r.cp,
                           .partition = r.partition,
                           .concurrency = r.concurrency,
                           .runs = 0,
                           .ok_runs = 0,
                           .median = std::nullopt,
                           .server_median = {}});
        }
        g.push_back(&r);
    }
    for (SummaryRow& s : out) {
        const std::vector<const RunRow*>& g = groups[{s.layout, s.concurrency}];
        s.runs = static_cast<int>(g.size());
        std::vector<const RunMetrics*> ok;
        for (const RunRow* r : g) {
            if (r->status == kRunOk && r->metrics) ok.push_back(&*r->metrics);
        }
        s.ok_runs = static_cast<int>(ok.size());
        std::vector<const ServerStats*> ok_server;
        for (const RunRow* r : g) {
            if (r->status == kRunOk) ok_server.push_back(&r->server);
        }
        s.server_median = median_server_stats(ok_server);
        if (ok.empty()) continue;
        const auto med = [&](auto field) {
            std::vector<double> v;
            for (const RunMetrics* m : ok) v.push_back(static_cast<double>(m->*field));
            return *median(std::move(v));
        };
        RunMetrics m;
        m.completed = static_cast<int64_t>(med(&RunMetrics::completed));
        m.failed = static_cast<int64_t>(med(&RunMetrics::failed));
        m.ttft_mean_ms = med(&RunMetrics::ttft_mean_ms);
        m.ttft_p50_ms = med(&RunMetrics::ttft_p50_ms);
        m.ttft_p95_ms = med(&RunMetrics::ttft_p95_ms);
        m.ttft_p99_ms = med(&RunMetrics::ttft_p99_ms);
        m.e2e_p50_ms = med(&RunMetrics::e2e_p50_ms);
        m.input_tok_s = med(&RunMetrics::input_tok_s);
        m.output_tok_s = med(&RunMetrics::output_tok_s);
        m.duration_s = med(&RunMetrics::duration_s);
        s.median = m;
    }
    return out;
}

namespace {

std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
    std::string out = "\"";
    for (char c : s) {
        if (c == '"') out.push_back('"');
        out.push_back(c);
    }
    return out + "\"";
}

std::string num(double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    return buf;
}

// The metric cells shared by both files, in this order.
constexpr const char* kMetricHeader =
    "ttft_mean_ms,ttft_p50_ms,ttft_p95_ms,ttft_p99_ms,e2e_p50_ms,input_tok_s,output_tok_s,duration_s";

std::string metric_cells(const std::optional<RunMetrics>& m) {
    if (!m) return ",,,,,,,";
    return num(m->ttft_mean_ms) + "," + num(m->ttft_p50_ms) + "," + num(m->ttft_p95_ms) + "," + num(m->ttft_p99_ms) +
           "," + num(m->e2e_p50_ms) + "," + num(m->input_tok_s) + "," + num(m->output_tok_s) + "," +
           num(m->duration_s);
}

// The server-side cells shared by both files, in this order (docs/design/bench.md).
constexpr const char* kServerHeader =
    "stages,busy_frac_mean,busy_frac_min,bubble_frac_mean,boundary_stall_s,boundary_stall_frac,active_s,"
    "stage_busy_frac,stage_stall_s,peak_rss_mib_max,peak_rss_mib_ranks,gpu_mem_mib_max,gpu_mem_mib_ranks";

std::string opt_num(const std::optional<double>& v) { return v ? num(*v) : ""; }

// "a;b;c" (a list inside one CSV cell).
std::string list_cell(const std::vector<double>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ";" : "") + num(v[i]);
    return out;
}

std::optional<double> max_of(const std::vector<double>& v) {
    if (v.empty()) return std::nullopt;
    return *std::max_element(v.begin(), v.end());
}

std::string server_cells(const ServerStats& s) {
    const std::string stages = s.stage_busy_fraction.empty() ? "" : std::to_string(s.stage_busy_fraction.size());
    return stages + "," + opt_num(s.busy_fraction_mean()) + "," + opt_num(s.busy_fraction_min()) + "," +
           opt_num(s.bubble_fraction_mean()) + "," + opt_num(s.boundary_stall_s()) + "," +
           opt_num(s.boundary_stall_fraction()) + "," + opt_num(s.active_s) + "," + list_cell(s.stage_busy_fraction) +
           "," + list_cell(s.stage_stall_s) + "," + opt_num(max_of(s.peak_rss_mib)) + "," + list_cell(s.peak_rss_mib) +
           "," + opt_num(max_of(s.gpu_mem_mib)) + "," + list_cell(s.gpu_mem_mib);
}

std::string layout_cells(const std::string& layout, int pp, int tp, int ep, int cp, const std::string& partition) {
    return csv_field(layout) + "," + std::to_string(pp) + "," + std::to_string(tp) + "," + std::to_string(ep) + "," +
           std::to_string(cp) + "," + csv_field(partition);
}

}  // namespace

std::string results_csv(const std::vector<RunRow>& rows) {
    std::string out = "layout,pp,tp,ep,cp,partition,concurrency,repeat,status,num_prompts,completed,failed,";
    out += kMetricHeader;
    out += ",";
    out += kServerHeader;
    out += ",error,dir\n";
    const auto cell = [&out](const std::string& s) {
        out += s;
        out += ',';
    };
    for (const RunRow& r : rows) {
        cell(layout_cells(r.layout, r.pp, r.tp, r.ep, r.cp, r.partition));
        cell(std::to_string(r.concurrency));
        cell(std::to_string(r.repeat));
        cell(r.status);
        cell(std::to_string(r.num_prompts));
        cell(r.metrics ? std::to_string(r.metrics->completed) : "");
        cell(r.metrics ? std::to_string(r.metrics->failed) : "");
        cell(metric_cells(r.metrics));
        cell(server_cells(r.server));
        cell(csv_field(r.error));
        out += csv_field(r.dir);
        out += '\n';
    }
    return out;
}

namespace {

// The records of RFC 4180 text: quoted fields with "" escapes, LF or CRLF line ends; a final line end is optional.
Result<std::vector<std::vector<std::string>>> csv_records(const std::string& text) {
    std::vector<std::vector<std::string>> out;
    std::vector<std::string> rec;
    std::string field;
    bool quoted = false, in_quotes = false, any = false;
    const auto end_field = [&] {
        rec.push_back(std::move(field));
        field.clear();
        quoted = false;
    };
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        any = true;
        if (in_quotes) {
            if (c != '"') {
                field.push_back(c);
            } else if (i + 1 < text.size() && text[i + 1] == '"') {
                field.push_back('"');
                ++i;
            } else {
                in_quotes = false;
            }
        } else if (c == '"' && field.empty() && !quoted) {
            in_quotes = quoted = true;
        } else if (c == ',') {
            end_field();
        } else if (c == '\n' || c == '\r') {
            if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
            end_field();
            out.push_back(std::move(rec));
            rec.clear();
            any = false;
        } else {
            if (quoted)
                return invalid_argument("line " + std::to_string(out.size() + 1) + ": text after a quoted field");
            field.push_back(c);
        }
    }
    if (in_quotes) return invalid_argument("line " + std::to_string(out.size() + 1) + ": unterminated quoted field");
    if (any) {
        end_field();
        out.push_back(std::move(rec));
    }
    return out;
}

Result<double> number_cell(const std::string& s, const char* what) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size())
        return invalid_argument(std::string(what) + " '" + s + "' is not a number");
    return v;
}

Result<std::optional<double>> optional_cell(const std::string& s, const char* what) {
    if (s.empty()) return std::optional<double>();
    PENSTOCK_ASSIGN_OR_RETURN(const double v, number_cell(s, what));
    return std::optional<double>(v);
}

Result<std::vector<double>> list_of(const std::string& s, const char* what) {
    std::vector<double> out;
    if (s.empty()) return out;
    size_t start = 0;
    while (true) {
        const size_t semi = s.find(';', start);
        PENSTOCK_ASSIGN_OR_RETURN(const double v, number_cell(s.substr(start, semi - start), what));
        out.push_back(v);
        if (semi == std::string::npos) return out;
        start = semi + 1;
    }
}

// One results.csv record (the columns of results_csv) back into a row.
Result<RunRow> run_row_of(const std::vector<std::string>& f) {
    RunRow r;
    size_t i = 0;
    const auto next = [&]() -> const std::string& { return f[i++]; };
    const auto integer = [&](const char* what) -> Result<int64_t> {
        PENSTOCK_ASSIGN_OR_RETURN(const double v, number_cell(next(), what));
        if (v != std::floor(v)) return invalid_argument(std::string(what) + " is not a whole number");
        return static_cast<int64_t>(v);
    };
    r.layout = next();
    PENSTOCK_ASSIGN_OR_RETURN(const int64_t pp, integer("pp"));
    PENSTOCK_ASSIGN_OR_RETURN(const int64_t tp, integer("tp"));
    PENSTOCK_ASSIGN_OR_RETURN(const int64_t ep, integer("ep"));
    PENSTOCK_ASSIGN_OR_RETURN(const int64_t cp, integer("cp"));
    r.pp = static_cast<int>(pp);
    r.tp = static_cast<int>(tp);
    r.ep = static_cast<int>(ep);
    r.cp = static_cast<int>(cp);
    r.partition = next();
    PENSTOCK_ASSIGN_OR_RETURN(r.concurrency, integer("concurrency"));
    PENSTOCK_ASSIGN_OR_RETURN(const int64_t repeat, integer("repeat"));
    r.repeat = static_cast<int>(repeat);
    r.status = next();
    PENSTOCK_ASSIGN_OR_RETURN(r.num_prompts, integer("num_prompts"));
    if (!f[i].empty()) {  // completed: the metrics are there
        RunMetrics m;
        PENSTOCK_ASSIGN_OR_RETURN(m.completed, integer("completed"));
        PENSTOCK_ASSIGN_OR_RETURN(m.failed, integer("failed"));
        double* cells[] = {&m.ttft_mean_ms, &m.ttft_p50_ms, &m.ttft_p95_ms,  &m.ttft_p99_ms,
                           &m.e2e_p50_ms,   &m.input_tok_s, &m.output_tok_s, &m.duration_s};
        for (double* c : cells) {
            PENSTOCK_ASSIGN_OR_RETURN(*c, number_cell(next(), "a metric"));
        }
        r.metrics = m;
    } else {
        i += 10;  // completed, failed and the 8 metric cells, all empty
    }
    i += 6;  // stages and the cells derived from the lists below (busy mean / min, bubble, boundary stall, fraction)
    PENSTOCK_ASSIGN_OR_RETURN(r.server.active_s, optional_cell(next(), "active_s"));
    PENSTOCK_ASSIGN_OR_RETURN(r.server.stage_busy_fraction, list_of(next(), "stage_busy_frac"));
    PENSTOCK_ASSIGN_OR_RETURN(r.server.stage_stall_s, list_of(next(), "stage_stall_s"));
    ++i;  // peak_rss_mib_max
    PENSTOCK_ASSIGN_OR_RETURN(r.server.peak_rss_mib, list_of(next(), "peak_rss_mib_ranks"));
    ++i;  // gpu_mem_mib_max
    PENSTOCK_ASSIGN_OR_RETURN(r.server.gpu_mem_mib, list_of(next(), "gpu_mem_mib_ranks"));
    r.error = next();
    r.dir = next();
    return r;
}

}  // namespace

Result<std::vector<RunRow>> parse_results_csv(const std::string& text) {
    PENSTOCK_ASSIGN_OR_RETURN(const std::vector<std::vector<std::string>> records, csv_records(text));
    std::string header = results_csv({});
    header.pop_back();  // the line end
    if (records.empty()) return invalid_argument("results.csv is empty (no header)");
    std::string got;
    for (size_t i = 0; i < records[0].size(); ++i) got += (i ? "," : "") + records[0][i];
    if (got != header) return invalid_argument("line 1: not the header this build writes: '" + got + "'");
    std::vector<RunRow> rows;
    for (size_t l = 1; l < records.size(); ++l) {
        const std::string where = "line " + std::to_string(l + 1) + ": ";
        if (records[l].size() != records[0].size()) {
            return invalid_argument(where + std::to_string(records[l].size()) + " cells, the header has " +
                                    std::to_string(records[0].size()));
        }
        Result<RunRow> row = run_row_of(records[l]);
        if (!row.ok()) return invalid_argument(where + row.status().message());
        rows.push_back(std::move(row).value());
    }
    return rows;
}

std::string summary_csv(const std::vector<SummaryRow>& rows) {
    std::string out = "layout,pp,tp,ep,cp,partition,concurrency,runs,ok_runs,";
    out += kMetricHeader;
    out += ",";
    out += kServerHeader;
    out += "\n";
    for (const SummaryRow& s : rows) {
        for (const std::string& c : {layout_cells(s.layout, s.pp, s.tp, s.ep, s.cp, s.partition),
                                     std::to_string(s.concurrency), std::to_string(s.runs),
                                     std::to_string(s.ok_runs)}) {
            out += c;
            out += ',';
        }
        out += metric_cells(s.median);
        out += ',';
        out += server_cells(s.server_median);
        out += '\n';
    }
    return out;
}

namespace {

Status write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    if (!out) return internal_error("cannot write " + path.string());
    return ok_status();
}

// A gnuplot single-quoted string body ('' escapes a quote).
std::string gp_quote(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '\'') out.push_back('\'');
        out.push_back(c);
    }
    return out;
}

std::string gp_header(const std::string& terminal, const std::string& png, const std::string& title,
                      const std::string& ylabel, const std::vector<int64_t>& xs) {
    std::ostringstream gp;
    gp << "# Drawn by `penstock sweep` from summary.csv (medians over repeats); run `gnuplot "
       << png.substr(0, png.size() - 4) << ".gp` in this directory.\n";
    gp << "set terminal " << terminal << " size 1000,600" << (terminal == "pngcairo" ? " font 'sans,11'" : "")
       << "\nset termoption noenhanced\nset output '" << png << "'\n";
    gp << "set title '" << gp_quote(title) << "'\nset xlabel 'concurrency (requests in flight)'\nset ylabel '" << ylabel
       << "'\nset grid\nset key outside right top\nset yrange [0:*]\n";
    gp << "set xtics (";
    for (size_t i = 0; i < xs.size(); ++i) gp << (i ? ", " : "") << xs[i];
    gp << ")\n";
    if (!xs.empty()) {
        const double span = static_cast<double>(xs.back() - xs.front());
        const double pad = span > 0 ? span * 0.08 : 1.0;
        gp << "set xrange [" << static_cast<double>(xs.front()) - pad << ":" << static_cast<double>(xs.back()) + pad
           << "]\n";
    }
    return gp.str();
}

}  // namespace

Result<std::vector<PlotScript>> write_plot_files(const std::string& plots_dir, const std::vector<SummaryRow>& rows,
                                                 const std::string& terminal, const std::string& title) {
    std::vector<std::string> layouts;
    std::map<std::string, std::string> data;
    std::set<int64_t> xs_set;
    bool have_pipeline = false;
    for (const SummaryRow& s : rows) {
        if (!s.median) continue;
        if (data.count(s.layout) == 0) layouts.push_back(s.layout);
        const std::optional<double> bubble = s.server_median.bubble_fraction_mean();
        const std::optional<double> stall = s.server_median.boundary_stall_fraction();
        have_pipeline = have_pipeline || bubble.has_value();
        char line[256];
        std::snprintf(line, sizeof(line), "%lld %.6g %.6g %.6g %s %s\n", static_cast<long long>(s.concurrency),
                      s.median->input_tok_s, s.median->ttft_p50_ms, s.median->ttft_p95_ms,
                      bubble ? num(*bubble).c_str() : "NaN", stall ? num(*stall).c_str() : "NaN");
        data[s.layout] += line;
        xs_set.insert(s.concurrency);
    }
    if (layouts.empty()) return failed_precondition("no layout has a successful run to plot");
    std::error_code ec;
    fs::create_directories(fs::path(plots_dir) / "data", ec);
    if (ec) return internal_error("cannot create " + plots_dir + "/data: " + ec.message());
    for (const std::string& l : layouts) {
        PENSTOCK_RETURN_IF_ERROR(
            write_text(fs::path(plots_dir) / "data" / (l + ".dat"),
                       "# concurrency input_tok_s ttft_p50_ms ttft_p95_ms bubble_frac_mean boundary_stall_frac "
                       "(medians)\n" +
                           data[l]));
    }
    const std::vector<int64_t> xs(xs_set.begin(), xs_set.end());
    std::string tps = gp_header(terminal, "input_tps.png", title + ": input tokens/s", "input tokens/s", xs);
    std::string ttft = gp_header(terminal, "ttft.png", title + ": TTFT p50 (solid) and p95 (dashed)", "TTFT (ms)", xs);
    tps += "plot ";
    ttft += "plot ";
    for (size_t i = 0; i < layouts.size(); ++i) {
        const std::string file = "'data/" + layouts[i] + ".dat'";
        const std::string lc = " lc " + std::to_string(i + 1);
        const std::string sep = i + 1 < layouts.size() ? ", \\\n     " : "\n";
        tps += file + " using 1:2 with linespoints lw 2 pt 7" + lc + " title '" + layouts[i] + "'" + sep;
        ttft += file + " using 1:3 with linespoints lw 2 pt 7 dt 1" + lc + " title '" + layouts[i] + " p50', \\\n     " +
                file + " using 1:4 with linespoints lw 2 pt 5 dt 2" + lc + " title '" + layouts[i] + " p95'" + sep;
    }
    PENSTOCK_RETURN_IF_ERROR(write_text(fs::path(plots_dir) / "input_tps.gp", tps));
    PENSTOCK_RETURN_IF_ERROR(write_text(fs::path(plots_dir) / "ttft.gp", ttft));
    std::vector<PlotScript> scripts = {{"input_tps.gp", "input_tps.png"}, {"ttft.gp", "ttft.png"}};
    if (have_pipeline) {
        std::string pipe = gp_header(terminal, "pipeline.png",
                                     title + ": bubble fraction (solid) and boundary stall fraction (dashed)",
                                     "fraction of active time", xs);
        pipe += "set yrange [0:1.05]\nplot ";
        for (size_t i = 0; i < layouts.size(); ++i) {
            const std::string file = "'data/" + layouts[i] + ".dat'";
            const std::string lc = " lc " + std::to_string(i + 1);
            const std::string sep = i + 1 < layouts.size() ? ", \\\n     " : "\n";
            pipe += file + " using 1:5 with linespoints lw 2 pt 7 dt 1" + lc + " title '" + layouts[i] +
                    " bubble', \\\n     " + file + " using 1:6 with linespoints lw 2 pt 5 dt 2" + lc + " title '" +
                    layouts[i] + " stall'" + sep;
        }
        PENSTOCK_RETURN_IF_ERROR(write_text(fs::path(plots_dir) / "pipeline.gp", pipe));
        scripts.push_back({"pipeline.gp", "pipeline.png"});
    }
    return scripts;
}

}  // namespace penstock::bench
