// Sweep matrix parsing with toml++ (which throws): the parse is wrapped here and every problem becomes one
// InvalidArgument Status naming file:line:col and the key path. A TableReader consumes the keys of one table and
// reports whatever is left over as unknown.
#include "bench/sweep_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <toml++/toml.h>

namespace penstock::bench {

std::string SweepLayout::partition_string() const {
    std::string s;
    for (size_t i = 0; i < pp_layer_partition.size(); ++i) {
        if (i > 0) s.push_back(',');
        s += std::to_string(pp_layer_partition[i]);
    }
    return s;
}

namespace {

std::string where(const std::string& source, const toml::source_region& r) {
    return source + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

std::string type_name(const toml::node& n) {
    switch (n.type()) {
        case toml::node_type::none: return "nothing";
        case toml::node_type::table: return "a table";
        case toml::node_type::array: return "an array";
        case toml::node_type::string: return "a string";
        case toml::node_type::integer: return "an integer";
        case toml::node_type::floating_point: return "a float";
        case toml::node_type::boolean: return "a boolean";
        case toml::node_type::date: return "a date";
        case toml::node_type::time: return "a time";
        case toml::node_type::date_time: return "a date-time";
    }
    return "a value";
}

// Reads the keys of one table; the first problem is kept in *error and later calls do nothing.
class TableReader final {
public:
    TableReader(const toml::table& t, std::string path, const std::string& source, Status* error)
        : t_(t), path_(std::move(path)), source_(source), error_(error) {}

    const toml::node* take(std::string_view key, bool required) {
        used_.insert(std::string(key));
        const toml::node* n = t_.get(key);
        if (n == nullptr && required) fail(t_.source(), key, "is required" + near_miss(key));
        return error_->ok() ? n : nullptr;
    }

    // " (found 'concurency': a typo?)" when the table holds a key within edit distance max(2, len/3) of `key`.
    std::string near_miss(std::string_view key) const {
        for (auto&& [k, v] : t_) {
            const std::string_view other = k.str();
            std::vector<size_t> row(other.size() + 1);
            for (size_t j = 0; j <= other.size(); ++j) row[j] = j;
            for (size_t i = 1; i <= key.size(); ++i) {
                size_t diag = row[0];
                row[0] = i;
                for (size_t j = 1; j <= other.size(); ++j) {
                    const size_t up = row[j];
                    row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (key[i - 1] == other[j - 1] ? 0 : 1)});
                    diag = up;
                }
            }
            if (row[other.size()] <= std::max<size_t>(2, key.size() / 3)) return " (found '" + std::string(other) + "': a typo?)";
        }
        return "";
    }

    void fail(const toml::source_region& r, std::string_view key, const std::string& what) {
        if (!error_->ok()) return;
        *error_ = invalid_argument(where(source_, r) + ": " + key_path(key) + ": " + what);
    }
    void fail_node(const toml::node& n, std::string_view key, const std::string& what) {
        fail(n.source(), key, what + " (got " + type_name(n) + ")");
    }

    std::string key_path(std::string_view key) const {
        return path_.empty() ? std::string(key) : path_ + (key.empty() || key[0] == '[' ? "" : ".") + std::string(key);
    }

    void str(std::string_view key, std::string* out, bool required = false, bool non_empty = true) {
        const toml::node* n = take(key, required);
        if (n == nullptr) return;
        if (!n->is_string()) return fail_node(*n, key, "must be a string");
        *out = **n->as_string();
        if (non_empty && out->empty()) fail(n->source(), key, "must not be empty");
    }

    void integer(std::string_view key, int64_t* out, int64_t lo, int64_t hi, bool required = false) {
        const toml::node* n = take(key, required);
        if (n == nullptr) return;
        if (!n->is_integer()) return fail_node(*n, key, "must be an integer");
        const int64_t v = **n->as_integer();
        if (v < lo || v > hi) {
            return fail(n->source(), key,
                        "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " +
                            std::to_string(v) + ")");
        }
        *out = v;
    }
    void integer(std::string_view key, int* out, int64_t lo, int64_t hi, bool required = false) {
        int64_t v = *out;
        integer(key, &v, lo, hi, required);
        *out = static_cast<int>(v);
    }

    void number(std::string_view key, double* out, double lo, double hi) {
        const toml::node* n = take(key, false);
        if (n == nullptr) return;
        double v = 0;
        if (n->is_integer()) {
            v = static_cast<double>(**n->as_integer());
        } else if (n->is_floating_point()) {
            v = **n->as_floating_point();
        } else {
            return fail_node(*n, key, "must be a number");
        }
        if (!(v >= lo && v <= hi)) {
            std::ostringstream os;
            os << "must be in [" << lo << ", " << hi << "] (got " << v << ")";
            return fail(n->source(), key, os.str());
        }
        *out = v;
    }

    void boolean(std::string_view key, bool* out) {
        const toml::node* n = take(key, false);
        if (n == nullptr) return;
        if (!n->is_boolean()) return fail_node(*n, key, "must be true or false");
        *out = **n->as_boolean();
    }

    void strings(std::string_view key, std::vector<std::string>* out) {
        const toml::node* n = take(key, false);
        if (n == nullptr) return;
        if (!n->is_array()) return fail_node(*n, key, "must be an array of strings");
        out->clear();
        for (const toml::node& e : *n->as_array()) {
            if (!e.is_string()) return fail_node(e, std::string(key) + "[" + std::to_string(out->size()) + "]",
                                                 "must be a string");
            out->push_back(**e.as_string());
        }
    }

    void integers(std::string_view key, std::vector<int64_t>* out, int64_t lo, int64_t hi, bool required = false) {
        const toml::node* n = take(key, required);
        if (n == nullptr) return;
        if (!n->is_array()) return fail_node(*n, key, "must be an array of integers");
        out->clear();
        for (const toml::node& e : *n->as_array()) {
            const std::string k = std::string(key) + "[" + std::to_string(out->size()) + "]";
            if (!e.is_integer()) return fail_node(e, k, "must be an integer");
            const int64_t v = **e.as_integer();
            if (v < lo || v > hi) {
                return fail(e.source(), k,
                            "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " +
                                std::to_string(v) + ")");
            }
            out->push_back(v);
        }
        if (out->empty()) fail(n->source(), key, "must not be empty");
    }

    const toml::table* table(std::string_view key) {
        const toml::node* n = take(key, false);
        if (n == nullptr) return nullptr;
        if (!n->is_table()) {
            fail_node(*n, key, "must be a table");
            return nullptr;
        }
        return n->as_table();
    }

    // Unknown keys are errors: a misspelt key would otherwise silently keep its default.
    void finish() {
        for (auto&& [k, v] : t_) {
            if (used_.count(std::string(k.str())) == 0) fail(v.source(), k.str(), "unknown key");
        }
    }

    const toml::table& raw() const { return t_; }
    const std::string& path() const { return path_; }

private:
    const toml::table& t_;
    std::string path_;
    const std::string& source_;
    Status* error_;
    std::set<std::string> used_;
};

constexpr int64_t kMaxRanks = 4096;
constexpr double kMaxSeconds = 7 * 24 * 3600.0;

bool valid_name(const std::string& s) {
    if (s.empty() || s == "." || s == "..") return false;
    for (char c : s) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                        c == '-' || c == '.';
        if (!ok) return false;
    }
    return true;
}

// pp_layer_partition = "7,5,6" or [7, 5, 6].
void read_partition(TableReader& r, SweepLayout* l) {
    const toml::node* n = r.raw().get("pp_layer_partition");
    if (n != nullptr && n->is_string()) {
        r.take("pp_layer_partition", false);
        const std::string text = **n->as_string();
        std::stringstream ss(text);
        std::string item;
        while (std::getline(ss, item, ',')) {
            char* end = nullptr;
            const long long v = std::strtoll(item.c_str(), &end, 10);
            if (item.empty() || end == nullptr || *end != '\0' || v < 1) {
                return r.fail(n->source(), "pp_layer_partition",
                              "must list layer counts >= 1 separated by commas (got \"" + text + "\")");
            }
            l->pp_layer_partition.push_back(v);
        }
        if (l->pp_layer_partition.empty()) r.fail(n->source(), "pp_layer_partition", "must not be empty");
        return;
    }
    r.integers("pp_layer_partition", &l->pp_layer_partition, 1, std::numeric_limits<int32_t>::max());
}

void read_layout(const toml::table& t, size_t index, const std::string& source, Status* error, SweepLayout* l) {
    TableReader r(t, "layouts[" + std::to_string(index) + "]", source, error);
    r.integer("pp", &l->pp, 1, kMaxRanks);
    r.integer("tp", &l->tp, 1, kMaxRanks);
    r.integer("ep", &l->ep, 1, kMaxRanks);
    r.integer("cp", &l->cp, 1, kMaxRanks);
    read_partition(r, l);
    r.strings("args", &l->args);
    r.str("name", &l->name);
    r.finish();
    if (!error->ok()) return;
    if (l->tp % l->ep != 0) {
        return r.fail(t.source(), "ep",
                      "must divide tp (got tp=" + std::to_string(l->tp) + ", ep=" + std::to_string(l->ep) + ")");
    }
    if (static_cast<int64_t>(l->pp) * l->tp * l->cp > kMaxRanks) {
        return r.fail(t.source(), "pp", "pp * tp * cp is more than " + std::to_string(kMaxRanks) + " ranks");
    }
    if (!l->pp_layer_partition.empty() && l->pp_layer_partition.size() != static_cast<size_t>(l->pp)) {
        return r.fail(t.get("pp_layer_partition")->source(), "pp_layer_partition",
                      "has " + std::to_string(l->pp_layer_partition.size()) + " entries but pp = " +
                          std::to_string(l->pp));
    }
    if (l->name.empty()) {
        l->name = "pp" + std::to_string(l->pp) + "_tp" + std::to_string(l->tp) + "_ep" + std::to_string(l->ep) +
                  "_cp" + std::to_string(l->cp);
    }
    if (!valid_name(l->name)) {
        r.fail(t.source(), "name", "must use only letters, digits, '_', '-' and '.' (got \"" + l->name + "\")");
    }
}

void read_launcher(TableReader& top, const std::string& source, Status* error, SweepLauncher* out) {
    const toml::table* t = top.table("launcher");
    if (t == nullptr) return;
    TableReader r(*t, "launcher", source, error);
    r.str("mpirun", &out->mpirun);
    r.strings("args", &out->args);
    r.boolean("always", &out->always);
    if (const toml::table* env = r.table("env")) {
        for (auto&& [k, v] : *env) {
            const std::string key(k.str());
            if (key.empty() || key.find('=') != std::string::npos) {
                return r.fail(v.source(), "env." + key, "is not a valid environment variable name");
            }
            if (v.is_string()) {
                out->env.emplace_back(key, **v.as_string());
            } else if (v.is_integer()) {
                out->env.emplace_back(key, std::to_string(**v.as_integer()));
            } else {
                return r.fail_node(v, "env." + key, "must be a string or an integer");
            }
        }
    }
    r.finish();
}

void read_bench(TableReader& top, const std::string& source, Status* error, SweepBench* b) {
    const toml::table* t = top.table("bench");
    if (t == nullptr) return top.fail(top.raw().source(), "bench", "is required");
    TableReader r(*t, "bench", source, error);
    r.str("dataset", &b->dataset);
    r.integer("input_len", &b->input_len, 1, int64_t{1} << 30, /*required=*/true);
    r.integer("output_len", &b->output_len, 1, int64_t{1} << 30);
    r.number("range_ratio", &b->range_ratio, 0.0, 1.0);
    r.integer("num_prompts", &b->num_prompts, 1, int64_t{1} << 30);
    r.integer("prompts_per_concurrency", &b->prompts_per_concurrency, 1, int64_t{1} << 20);
    int64_t seed = static_cast<int64_t>(b->seed);
    r.integer("seed", &seed, 0, std::numeric_limits<int64_t>::max());
    b->seed = static_cast<uint64_t>(seed);
    r.number("request_timeout_s", &b->request_timeout_s, 0.001, kMaxSeconds);
    r.strings("args", &b->args);
    r.finish();
    if (!error->ok()) return;
    if (b->dataset != "random" && b->dataset != "random-ids") {
        return r.fail(t->get("dataset")->source(), "dataset", "must be \"random\" or \"random-ids\" (got \"" +
                                                                  b->dataset + "\")");
    }
    if ((b->num_prompts > 0) == (b->prompts_per_concurrency > 0)) {
        r.fail(t->source(), "num_prompts", "give exactly one of bench.num_prompts and bench.prompts_per_concurrency");
    }
}

void read_small_tables(TableReader& top, const std::string& source, Status* error, SweepConfig* c) {
    if (const toml::table* t = top.table("timeouts")) {
        TableReader r(*t, "timeouts", source, error);
        r.number("server_start_s", &c->timeouts.server_start_s, 0.001, kMaxSeconds);
        r.number("run_s", &c->timeouts.run_s, 0.001, kMaxSeconds);
        r.number("stop_grace_s", &c->timeouts.stop_grace_s, 0.0, kMaxSeconds);
        r.finish();
    }
    if (const toml::table* t = top.table("plots")) {
        TableReader r(*t, "plots", source, error);
        r.boolean("enabled", &c->plots.enabled);
        r.str("gnuplot", &c->plots.gnuplot);
        r.str("terminal", &c->plots.terminal);
        r.boolean("required", &c->plots.required);
        r.finish();
        if (error->ok() && c->plots.terminal != "pngcairo" && c->plots.terminal != "png") {
            r.fail(t->get("terminal")->source(), "terminal", "must be \"pngcairo\" or \"png\"");
        }
    }
}

void read_layouts(TableReader& top, const std::string& source, Status* error, SweepConfig* c) {
    const toml::node* n = top.take("layouts", /*required=*/true);
    if (n == nullptr) return;
    if (!n->is_array_of_tables()) return top.fail_node(*n, "layouts", "must be an array of tables ([[layouts]])");
    const toml::array& arr = *n->as_array();
    if (arr.empty()) return top.fail(n->source(), "layouts", "must not be empty");
    std::set<std::string> names;
    for (size_t i = 0; i < arr.size() && error->ok(); ++i) {
        SweepLayout l;
        read_layout(*arr[i].as_table(), i, source, error, &l);
        if (error->ok() && !names.insert(l.name).second) {
            top.fail(arr[i].source(), "layouts[" + std::to_string(i) + "].name",
                     "duplicate layout name \"" + l.name + "\" (set name = ... to tell them apart)");
        }
        c->layouts.push_back(std::move(l));
    }
}

}  // namespace

Result<SweepConfig> parse_sweep_config(std::string_view text, const std::string& source) {
    toml::table root;
    try {
        root = toml::parse(text, source);
    } catch (const toml::parse_error& e) {
        return invalid_argument(where(source, e.source()) + ": TOML syntax: " + std::string(e.description()));
    }
    SweepConfig c;
    c.source = source;
    Status error;
    TableReader r(root, "", source, &error);
    r.str("output_dir", &c.output_dir, /*required=*/true);
    r.str("model", &c.model, /*required=*/true);
    r.str("penstock", &c.penstock);
    r.str("host", &c.host);
    r.integer("port_base", &c.port_base, 0, 65535);
    r.strings("server_args", &c.server_args);
    r.integers("concurrencies", &c.concurrencies, 1, 1 << 20, /*required=*/true);
    r.integer("repeats", &c.repeats, 1, 1000);
    read_launcher(r, source, &error, &c.launcher);
    read_bench(r, source, &error, &c.bench);
    read_small_tables(r, source, &error, &c);
    read_layouts(r, source, &error, &c);
    r.finish();
    if (!error.ok()) return error;
    if (c.port_base > 0 && c.port_base + static_cast<int64_t>(c.layouts.size()) - 1 > 65535) {
        return invalid_argument(source + ": port_base: port_base + number of layouts - 1 exceeds 65535");
    }
    return c;
}

Result<SweepConfig> load_sweep_config(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return not_found("cannot open sweep file '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return parse_sweep_config(ss.str(), path);
}

}  // namespace penstock::bench
