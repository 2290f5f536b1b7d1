// Cluster profiles and their collective time model; the TOML reader wraps toml++ (which throws) so that every
// problem becomes one InvalidArgument.
#include "planner/cluster.h"

#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace penstock::planner {

double AllReducePoint::busbw_gbps() const {
    if (ranks < 2 || ms <= 0) return 0;
    return 2.0 * (ranks - 1) / ranks * bytes / (ms * 1e-3) / 1e9;
}

namespace {

// The link a group of `ranks` GPUs first, first + stride, ... uses: the slower of the two when it spans nodes.
Link group_link(const Cluster& c, int first, int ranks, int stride) {
    if (c.same_node(first, first + (ranks - 1) * stride)) return c.intra;
    return Link{.busbw_gbps = std::min(c.intra.busbw_gbps, c.inter.busbw_gbps),
                .p2p_gbps = std::min(c.intra.p2p_gbps, c.inter.p2p_gbps),
                .latency_us = std::max(c.intra.latency_us, c.inter.latency_us)};
}

}  // namespace

double Cluster::all_reduce_ms(double bytes, int ranks, int first_rank, int stride) const {
    if (ranks <= 1 || bytes <= 0) return 0;
    const Link l = group_link(*this, first_rank, ranks, stride);
    double busbw = l.busbw_gbps;
    for (const AllReducePoint& p : all_reduce) {
        if (p.ranks == ranks) busbw = p.busbw_gbps();
    }
    return l.latency_us * 1e-3 + 2.0 * (ranks - 1) / ranks * bytes / (busbw * 1e9) * 1e3;
}

double Cluster::all_gather_ms(double bytes, int ranks, int first_rank, int stride) const {
    // An all-gather moves half an all-reduce's bytes ((n - 1) / n of the result per rank).
    if (ranks <= 1 || bytes <= 0) return 0;
    const Link l = group_link(*this, first_rank, ranks, stride);
    return l.latency_us * 1e-3 + 0.5 * (all_reduce_ms(bytes, ranks, first_rank, stride) - l.latency_us * 1e-3);
}

double Cluster::send_ms(double bytes, int from, int to) const {
    if (bytes <= 0 || from == to) return 0;
    const Link& l = same_node(from, to) ? intra : inter;
    return l.latency_us * 1e-3 + bytes / (l.p2p_gbps * 1e9) * 1e3;
}

bool ClassRates::any() const {
    for (double r : {gemm, gemm_fp8, experts, experts_fp8, attention, attention_fp8, sparse_attention, indexer_f32,
                     indexer_fp8, indexer_fp8_accumulate, kda, topk_ps_per_pair, copy_gbps}) {
        if (r > 0) return true;
    }
    return false;
}

std::string builtin_cluster_names() { return "h200x8, rtx6000d-4x8"; }

Result<Cluster> builtin_cluster(const std::string& name) {
    Cluster c;
    c.name = name;
    if (name == "h200x8") {
        c.gpu = "NVIDIA H200";
        c.nodes = 1;
        c.gpus_per_node = 8;
        c.memory_gib = 139;
        c.bf16_tflops = 592;
        c.fp8_tflops = 857;
        c.peak_bf16_tflops = 989;  // dense, datasheet (shared/PERF.md)
        c.peak_fp8_tflops = 1979;
        c.intra = {.busbw_gbps = 285, .p2p_gbps = 348, .latency_us = 50};
        c.inter = {.busbw_gbps = 45, .p2p_gbps = 45, .latency_us = 20};
        c.all_reduce = {{.ranks = 2, .bytes = 134217728, .ms = 0.470}};
        // `penstock plan --calibrate` over the profiled layers in docs/perf/2026-12-05-s36/calibration (planner.md
        // "Calibration"): DeepSeek-V3 bf16 and FP8 + FP8 attention, GLM-5.3 bf16 with f32 (session 36's tensor-core
        // logits) and FP8 index keys and FP8 at 64K, Kimi K3 KDA bf16 and FP8.
        c.rates = {.gemm = 657.3,
                   .gemm_fp8 = 1075,
                   .experts = 817.4,
                   .experts_fp8 = 917.7,
                   .experts_half_rows = 150.5,
                   .experts_fp8_half_rows = 52.37,
                   .attention = 580,
                   .attention_fp8 = 721.1,
                   .sparse_attention = 522.2,
                   .indexer_f32 = 138,
                   .indexer_fp8 = 561.2,
                   .indexer_fp8_accumulate = 928.2,
                   .kda = 26.02,
                   .topk_ps_per_pair = 5.637,
                   .copy_gbps = 3613};
        c.notes = {
            "class rates: penstock plan --calibrate over 7 profiled layers of sessions 27 and 36 (DeepSeek-V3, "
            "GLM-5.3, "
            "Kimi K3 KDA; docs/perf/2026-12-05-s36/calibration, docs/design/planner.md); the layer rates below stand "
            "in "
            "for classes a cluster file does not measure",
            "layer rates: Penstock's DeepSeek-V3 layer at a 16K chunk, 51.0 ms bf16 / 35.2 ms FP8 weights + FP8 "
            "attention (docs/perf/issue7-goals.md), over this cost model's FLOPs",
            "NVLink: NCCL via torch on 2 H200 (shared/PERF.md): all-reduce 128 MiB 0.47 ms (285 GB/s busbw), 1 MiB "
            "53 us; send/recv 128 MiB 385 us (348 GB/s); 4- and 8-GPU groups are assumed to keep that bus bandwidth",
            "inter-node link: assumed (one node; 8 x 400G InfiniBand would give ~45 GB/s per GPU)"};
        return c;
    }
    if (name == "rtx6000d-4x8") {
        c.gpu = "RTX 6000D";
        c.nodes = 4;
        c.gpus_per_node = 8;
        c.memory_gib = 85651.0 / 1024.0;
        c.bf16_tflops = 200;
        c.fp8_tflops = 350;
        c.intra = {.busbw_gbps = 40.85, .p2p_gbps = 25, .latency_us = 20};
        c.inter = {.busbw_gbps = 39.47, .p2p_gbps = 25, .latency_us = 25};
        c.all_reduce = {{.ranks = 4, .bytes = 134217728, .ms = 4.93},
                        {.ranks = 8, .bytes = 134217728, .ms = 6.00},
                        {.ranks = 16, .bytes = 134217728, .ms = 6.24},
                        {.ranks = 32, .bytes = 134217728, .ms = 6.59}};
        c.notes = {
            "NCCL 2.28 all_reduce_perf at 128 MiB (SPEC §8): TP4 4.93 ms (one PCIe/NUMA island), TP8 6.00, TP16 "
            "6.24 (2 nodes), TP32 6.59 (4 nodes); 85,651 MiB per GPU",
            "assumed, not measured: layer rates 200 / 350 TFLOP/s (bf16 / FP8), send/recv 25 GB/s, latencies 20-25 "
            "us; measure them with penstock_model_bench and nccl-tests and pass a cluster file"};
        return c;
    }
    return not_found("no built-in cluster '" + name + "' (built-in: " + builtin_cluster_names() +
                     "; or give a TOML file)");
}

namespace {

class Reader final {
public:
    Reader(const toml::table& t, std::string path, std::string source)
        : t_(t), path_(std::move(path)), src_(std::move(source)) {}

    template <class T>
    void get(std::string_view key, T* out, bool required, double lo, double hi) {
        used_.insert(std::string(key));
        if (!err_.ok()) return;
        const toml::node* n = t_.get(key);
        if (n == nullptr) {
            if (required) fail(key, "is required");
            return;
        }
        double v = 0;
        if (const auto i = n->value<int64_t>()) {
            v = static_cast<double>(*i);
        } else if (const auto f = n->value<double>(); f && !n->is_integer()) {
            if constexpr (std::is_integral_v<T>) return fail(key, "must be an integer");
            v = *f;
        } else {
            return fail(key, "must be a number");
        }
        if (!(v >= lo && v <= hi)) {
            std::ostringstream os;
            os << "must be in [" << lo << ", " << hi << "], got " << v;
            return fail(key, os.str());
        }
        *out = static_cast<T>(v);
    }
    void get_string(std::string_view key, std::string* out) {
        used_.insert(std::string(key));
        if (!err_.ok()) return;
        const toml::node* n = t_.get(key);
        if (n == nullptr) return;
        if (const auto s = n->value<std::string>()) {
            *out = *s;
        } else {
            fail(key, "must be a string");
        }
    }
    const toml::table* table(std::string_view key, bool required) {
        used_.insert(std::string(key));
        if (!err_.ok()) return nullptr;
        const toml::node* n = t_.get(key);
        if (n == nullptr) {
            if (required) fail(key, "is required");
            return nullptr;
        }
        if (!n->is_table()) fail(key, "must be a table");
        return n->as_table();
    }
    const toml::array* array(std::string_view key) {
        used_.insert(std::string(key));
        if (!err_.ok()) return nullptr;
        const toml::node* n = t_.get(key);
        if (n == nullptr) return nullptr;
        if (!n->is_array()) fail(key, "must be an array of tables");
        return n->as_array();
    }
    Status finish() {
        if (!err_.ok()) return err_;
        for (const auto& [k, v] : t_) {
            if (!used_.contains(std::string(k.str()))) {
                return invalid_argument(src_ + ": unknown key '" + prefix() + std::string(k.str()) + "'");
            }
        }
        return ok_status();
    }
    void fail(std::string_view key, const std::string& what) {
        if (err_.ok()) err_ = invalid_argument(src_ + ": '" + prefix() + std::string(key) + "' " + what);
    }
    const Status& error() const { return err_; }

private:
    std::string prefix() const { return path_.empty() ? "" : path_ + "."; }
    const toml::table& t_;
    std::string path_, src_;
    std::set<std::string> used_;
    Status err_ = ok_status();
};

Status read_link(Reader& parent, const std::string& key, const std::string& source, Link* l) {
    const toml::table* t = parent.table(key, true);
    if (!parent.error().ok()) return parent.error();
    Reader r(*t, key, source);
    r.get("busbw_gbps", &l->busbw_gbps, true, 1e-3, 1e5);
    r.get("p2p_gbps", &l->p2p_gbps, true, 1e-3, 1e5);
    r.get("latency_us", &l->latency_us, true, 0, 1e6);
    return r.finish();
}

}  // namespace

Result<Cluster> parse_cluster(const std::string& text, const std::string& source) {
    toml::table doc;
    try {
        doc = toml::parse(text, source);
    } catch (const toml::parse_error& e) {
        std::ostringstream os;
        os << source << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
        return invalid_argument(os.str());
    }
    Cluster c;
    Reader r(doc, "", source);
    r.get_string("name", &c.name);
    r.get_string("gpu", &c.gpu);
    r.get("nodes", &c.nodes, true, 1, 1 << 16);
    r.get("gpus_per_node", &c.gpus_per_node, true, 1, 1024);
    r.get("memory_gib", &c.memory_gib, true, 1e-3, 1e6);
    r.get("bf16_tflops", &c.bf16_tflops, true, 1e-3, 1e6);
    r.get("fp8_tflops", &c.fp8_tflops, false, 1e-3, 1e6);
    if (c.fp8_tflops <= 0) c.fp8_tflops = c.bf16_tflops;
    r.get("peak_bf16_tflops", &c.peak_bf16_tflops, false, 1e-3, 1e6);
    r.get("peak_fp8_tflops", &c.peak_fp8_tflops, false, 1e-3, 1e6);
    PENSTOCK_RETURN_IF_ERROR(read_link(r, "intra", source, &c.intra));
    PENSTOCK_RETURN_IF_ERROR(read_link(r, "inter", source, &c.inter));
    if (const toml::array* points = r.array("all_reduce")) {
        for (size_t i = 0; i < points->size(); ++i) {
            const toml::table* t = (*points)[i].as_table();
            const std::string key = "all_reduce[" + std::to_string(i) + "]";
            if (t == nullptr) return invalid_argument(source + ": '" + key + "' must be a table");
            Reader p(*t, key, source);
            AllReducePoint a;
            p.get("ranks", &a.ranks, true, 2, 1 << 20);
            p.get("bytes", &a.bytes, true, 1, 1e15);
            p.get("ms", &a.ms, true, 1e-6, 1e9);
            PENSTOCK_RETURN_IF_ERROR(p.finish());
            c.all_reduce.push_back(a);
        }
    }
    if (const toml::table* t = r.table("rates", false)) {
        Reader k(*t, "rates", source);
        ClassRates& x = c.rates;
        for (auto [key, out] : {std::pair{"gemm", &x.gemm},
                                {"gemm_fp8", &x.gemm_fp8},
                                {"experts", &x.experts},
                                {"experts_fp8", &x.experts_fp8},
                                {"attention", &x.attention},
                                {"attention_fp8", &x.attention_fp8},
                                {"sparse_attention", &x.sparse_attention},
                                {"indexer_f32", &x.indexer_f32},
                                {"indexer_fp8", &x.indexer_fp8},
                                {"indexer_fp8_accumulate", &x.indexer_fp8_accumulate},
                                {"kda", &x.kda}}) {
            k.get(key, out, false, 1e-3, 1e6);
        }
        k.get("experts_half_rows", &x.experts_half_rows, false, 0, 1e9);
        k.get("experts_fp8_half_rows", &x.experts_fp8_half_rows, false, 0, 1e9);
        k.get("topk_ps_per_pair", &x.topk_ps_per_pair, false, 0, 1e9);
        k.get("copy_gbps", &x.copy_gbps, false, 1e-3, 1e6);
        PENSTOCK_RETURN_IF_ERROR(k.finish());
    }
    PENSTOCK_RETURN_IF_ERROR(r.finish());
    if (c.name.empty()) c.name = source;
    c.notes.push_back("cluster file " + source);
    return c;
}

Result<Cluster> load_cluster(const std::string& path) {
    std::ifstream in(path);
    if (!in) return not_found("cluster file " + path + " cannot be read");
    std::ostringstream ss;
    ss << in.rdbuf();
    return parse_cluster(ss.str(), path);
}

Result<Cluster> cluster_from_arg(const std::string& name_or_path) {
    if (name_or_path.find('/') == std::string::npos && name_or_path.find(".toml") == std::string::npos) {
        return builtin_cluster(name_or_path);
    }
    return load_cluster(name_or_path);
}

}  // namespace penstock::planner
