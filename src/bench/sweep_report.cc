// Sweep results: summary-JSON intake, medians, CSV rendering and gnuplot scripts.
#include "bench/sweep_report.h"

#include <algorithm>
#include <cstdio>
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

std::optional<double> median(std::vector<double> v) {
    if (v.empty()) return std::nullopt;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

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
                           .median = std::nullopt});
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

std::string layout_cells(const std::string& layout, int pp, int tp, int ep, int cp, const std::string& partition) {
    return csv_field(layout) + "," + std::to_string(pp) + "," + std::to_string(tp) + "," + std::to_string(ep) + "," +
           std::to_string(cp) + "," + csv_field(partition);
}

}  // namespace

std::string results_csv(const std::vector<RunRow>& rows) {
    std::string out = "layout,pp,tp,ep,cp,partition,concurrency,repeat,status,num_prompts,completed,failed,";
    out += kMetricHeader;
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
        cell(csv_field(r.error));
        out += csv_field(r.dir);
        out += '\n';
    }
    return out;
}

std::string summary_csv(const std::vector<SummaryRow>& rows) {
    std::string out = "layout,pp,tp,ep,cp,partition,concurrency,runs,ok_runs,";
    out += kMetricHeader;
    out += "\n";
    for (const SummaryRow& s : rows) {
        for (const std::string& c : {layout_cells(s.layout, s.pp, s.tp, s.ep, s.cp, s.partition),
                                     std::to_string(s.concurrency), std::to_string(s.runs),
                                     std::to_string(s.ok_runs)}) {
            out += c;
            out += ',';
        }
        out += metric_cells(s.median);
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
    for (const SummaryRow& s : rows) {
        if (!s.median) continue;
        if (data.count(s.layout) == 0) layouts.push_back(s.layout);
        char line[256];
        std::snprintf(line, sizeof(line), "%lld %.6g %.6g %.6g\n", static_cast<long long>(s.concurrency),
                      s.median->input_tok_s, s.median->ttft_p50_ms, s.median->ttft_p95_ms);
        data[s.layout] += line;
        xs_set.insert(s.concurrency);
    }
    if (layouts.empty()) return failed_precondition("no layout has a successful run to plot");
    std::error_code ec;
    fs::create_directories(fs::path(plots_dir) / "data", ec);
    if (ec) return internal_error("cannot create " + plots_dir + "/data: " + ec.message());
    for (const std::string& l : layouts) {
        PENSTOCK_RETURN_IF_ERROR(write_text(fs::path(plots_dir) / "data" / (l + ".dat"),
                                            "# concurrency input_tok_s ttft_p50_ms ttft_p95_ms (medians)\n" + data[l]));
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
    return std::vector<PlotScript>{{"input_tps.gp", "input_tps.png"}, {"ttft.gp", "ttft.png"}};
}

}  // namespace penstock::bench
