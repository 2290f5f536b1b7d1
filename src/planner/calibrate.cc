// Splits layer-benchmark breakdowns into the planner's classes of work and derives the class rates (calibrate.h).
#include "planner/calibrate.h"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "models/layer_kinds.h"

namespace penstock::planner {

namespace {

using nlohmann::json;
using scheduler::OpClass;

std::string last_component(const std::string& path) {
    const size_t dot = path.rfind('.');
    return dot == std::string::npos ? path : path.substr(dot + 1);
}

bool contains(const std::string& path, const char* part) { return path.find(part) != std::string::npos; }

}  // namespace

ScopeClass classify_scope(const std::string& leaf_path) {
    // "X.(other)" is X's own time outside its children: it belongs where X does.
    std::string path = leaf_path;
    if (last_component(path) == "(other)") path = path.substr(0, path.rfind('.'));
    const std::string leaf = last_component(path);
    if (contains(path, ".experts") || path.ends_with("permute.act_quant")) return ScopeClass::kExperts;
    if (contains(path, ".kda.")) {
        static const std::set<std::string> kKdaKernels = {"conv", "recurrence", "decay", "beta", "o_norm"};
        if (kKdaKernels.contains(leaf)) return ScopeClass::kKda;
    }
    if (leaf == "attention" || leaf == "fp8_quant") return ScopeClass::kAttention;
    if (leaf == "sparse_mla") return ScopeClass::kSparseAttention;
    if (leaf == "logits") return ScopeClass::kIndexer;
    if (leaf == "topk") return ScopeClass::kTopk;
    // The dense linears, with the FP8 quantisation of their inputs (act_quant) where the weights are FP8.
    static const std::set<std::string> kGemmScopes = {
        "q_proj",     "kv_proj", "o_proj",       "out_gate",  "kv_expand", "absorb_q",
        "absorb_out", "wq_b",    "weights_proj", "f_proj",    "qkv_proj",  "gate_up",
        "down",       "router",  "latent_down",  "latent_up", "act_quant"};
    if (kGemmScopes.contains(leaf)) return ScopeClass::kGemm;
    return ScopeClass::kMemory;
}

Result<std::vector<BenchRun>> read_model_bench_json(const std::string& path) {
    std::ifstream in(path);
    if (!in) return not_found("bench result " + path + " cannot be read");
    json doc;
    try {
        doc = json::parse(in);
    } catch (const json::exception& e) {
        return invalid_argument("bench result " + path + ": " + e.what());
    }
    if (!doc.is_array()) doc = json::array({doc});
    std::vector<BenchRun> out;
    for (size_t i = 0; i < doc.size(); ++i) {
        const json& r = doc[i];
        const std::string where = path + "[" + std::to_string(i) + "]";
        try {
            BenchRun b;
            b.source = where;
            const json& layers = r.at("layers");
            if (!layers.is_array() || layers.size() != 2) return invalid_argument(where + ": 'layers' must be [b, e]");
            b.layer_begin = layers[0].get<int64_t>();
            b.layer_end = layers[1].get<int64_t>();
            b.tokens = r.at("tokens").get<int64_t>();
            b.prefix = r.value("prefix", int64_t{0});
            b.fp8_weights = r.contains("fp8_weights") && r["fp8_weights"].is_string() &&
                            r["fp8_weights"].get<std::string>() == "native";
            b.fp8_attention = r.value("fp8_attention", false);
            b.dsa_fp8_indexer = r.value("dsa_fp8_indexer", false);
            b.dsa_fp8_accumulate = r.value("dsa_fp8_accumulate", false);
            b.median_ms = r.at("median_ms").get<double>();
            if (r.value("mla_form", std::string("mha")) != "mha") {
                return invalid_argument(where + ": mla_form '" + r["mla_form"].get<std::string>() +
                                        "'; the cost model counts the MHA form, calibrate with --mla-form mha");
            }
            if (!r.contains("breakdown") || !r["breakdown"].is_array() || r["breakdown"].empty()) {
                return invalid_argument(where + ": no \"breakdown\" (run penstock_model_bench with --breakdown)");
            }
            for (const json& s : r["breakdown"])
                b.scopes.emplace_back(s.at("scope").get<std::string>(), s.at("median_ms").get<double>());
            if (b.tokens < 1 || b.prefix < 0 || b.layer_begin < 0 || b.layer_end <= b.layer_begin) {
                return invalid_argument(where + ": tokens, prefix or layers out of range");
            }
            out.push_back(std::move(b));
        } catch (const json::exception& e) {
            return invalid_argument(where + ": " + e.what());
        }
    }
    return out;
}

Result<RunSplit> split_run(const loader::ModelConfig& m, const BenchRun& run) {
    if (run.layer_end > m.num_hidden_layers) {
        return invalid_argument(run.source + ": layers [" + std::to_string(run.layer_begin) + ", " +
                                std::to_string(run.layer_end) + ") outside the model's " +
                                std::to_string(m.num_hidden_layers));
    }
    PENSTOCK_ASSIGN_OR_RETURN(const scheduler::CostBreakdown cost,
                              scheduler::count_layer_cost_breakdown(m, run.layer_begin, run.layer_end));
    PENSTOCK_ASSIGN_OR_RETURN(const models::LayerKinds kinds, models::layer_kinds(m));
    PENSTOCK_ASSIGN_OR_RETURN(const double bytes_per_token,
                              elementwise_bytes_per_token(m, run.layer_begin, run.layer_end));
    RunSplit s;
    for (size_t k = 0; k < scheduler::kNumOpClasses; ++k)
        s.flops[k] = scheduler::chunk_cost(cost.by_class[k], run.prefix, run.tokens);
    const double x = static_cast<double>(run.tokens), l = static_cast<double>(run.prefix);
    for (int64_t i = run.layer_begin; i < run.layer_end; ++i) {
        if (kinds.layers[static_cast<size_t>(i)].full_indexer) s.topk_pairs += x * (l + 0.5 * x);
    }
    s.bytes = bytes_per_token * x;
    if (m.n_routed_experts > 0) {
        s.rows_per_expert = x * static_cast<double>(m.num_experts_per_tok) / static_cast<double>(m.n_routed_experts);
    }
    for (const auto& [path, ms] : run.scopes) {
        const bool leaf = std::none_of(run.scopes.begin(), run.scopes.end(), [&](const auto& other) {
            return other.first.size() > path.size() && other.first.starts_with(path + ".");
        });
        if (!leaf) continue;
        s.leaves_ms += ms;
        const ScopeClass cls = classify_scope(path);
        if (cls == ScopeClass::kTopk) {
            s.topk_ms += ms;
        } else if (cls == ScopeClass::kMemory) {
            s.memory_ms += ms;
        } else {
            s.ms[static_cast<size_t>(cls)] += ms;  // the first six ScopeClass values are the OpClass values
        }
    }
    // The wall median holds a little time outside the profiled scopes (launch gaps; the profiled reps are other
    // reps): spread it over the classes in proportion, so that the rates reproduce the layer's wall time.
    if (s.leaves_ms > 0 && run.median_ms > 0) {
        const double scale = run.median_ms / s.leaves_ms;
        for (double& ms : s.ms) ms *= scale;
        s.topk_ms *= scale;
        s.memory_ms *= scale;
    }
    return s;
}

namespace {

// FLOPs and ms summed over the runs of one format, as a rate (TFLOP/s); 0 when no run measured it.
struct Sum {
    double flops = 0, ms = 0;
    void add(double f, double t) {
        if (f > 0 && t > 0) {
            flops += f;
            ms += t;
        }
    }
    double tflops() const { return ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0; }
};

// ms = flops / R · (r + r0) / r = a · flops + b · flops / r with a = 1 / R, b = r0 / R: least squares over the runs.
// Returns {R in TFLOP/s, r0}; r0 = 0 (one rate) with fewer than two different r or a fit that is not positive.
std::pair<double, double> fit_experts(const std::vector<std::array<double, 3>>& pts) {
    Sum total;
    std::set<double> rows;
    for (const auto& [f, t, r] : pts) {
        total.add(f, t);
        rows.insert(r);
    }
    if (rows.size() >= 2) {
        double s11 = 0, s12 = 0, s22 = 0, y1 = 0, y2 = 0;
        for (const auto& [f, t, r] : pts) {
            const double u = f * 1e-12, v = f * 1e-12 / r, y = t * 1e-3;
            s11 += u * u;
            s12 += u * v;
            s22 += v * v;
            y1 += u * y;
            y2 += v * y;
        }
        const double det = s11 * s22 - s12 * s12;
        if (det > 0) {
            const double a = (y1 * s22 - y2 * s12) / det, b = (s11 * y2 - s12 * y1) / det;
            if (a > 0 && b > 0) return {1.0 / a, b / a};
        }
    }
    return {total.tflops(), 0.0};
}

}  // namespace

Result<ClassRates> calibrate(const std::vector<std::pair<loader::ModelConfig, BenchRun>>& runs,
                             std::vector<RunSplit>* splits) {
    Sum gemm[2], attention[2], sparse, indexer[3], kda, topk, memory;
    double topk_pairs = 0, bytes = 0;
    std::vector<std::array<double, 3>> experts[2];
    if (splits != nullptr) splits->clear();
    for (const auto& [m, run] : runs) {
        PENSTOCK_ASSIGN_OR_RETURN(const RunSplit s, split_run(m, run));
        if (splits != nullptr) splits->push_back(s);
        const auto at = [&](OpClass k) {
            return std::pair{s.flops[static_cast<size_t>(k)], s.ms[static_cast<size_t>(k)]};
        };
        const int w = run.fp8_weights ? 1 : 0;
        const auto [gf, gt] = at(OpClass::kGemm);
        gemm[w].add(gf, gt);
        const auto [ef, et] = at(OpClass::kExperts);
        if (ef > 0 && et > 0) experts[w].push_back({ef, et, s.rows_per_expert});
        const auto [af, atm] = at(OpClass::kAttention);
        attention[run.fp8_attention ? 1 : 0].add(af, atm);
        const auto [sf, st] = at(OpClass::kSparseAttention);
        sparse.add(sf, st);
        const auto [xf, xt] = at(OpClass::kIndexer);
        indexer[!run.dsa_fp8_indexer ? 0 : run.dsa_fp8_accumulate ? 2 : 1].add(xf, xt);
        const auto [kf, kt] = at(OpClass::kKda);
        kda.add(kf, kt);
        if (s.topk_pairs > 0 && s.topk_ms > 0) {
            topk_pairs += s.topk_pairs;
            topk.ms += s.topk_ms;
        }
        if (s.bytes > 0 && s.memory_ms > 0) {
            bytes += s.bytes;
            memory.ms += s.memory_ms;
        }
    }
    ClassRates c;
    c.gemm = gemm[0].tflops();
    c.gemm_fp8 = gemm[1].tflops();
    std::tie(c.experts, c.experts_half_rows) = fit_experts(experts[0]);
    std::tie(c.experts_fp8, c.experts_fp8_half_rows) = fit_experts(experts[1]);
    c.attention = attention[0].tflops();
    c.attention_fp8 = attention[1].tflops();
    c.sparse_attention = sparse.tflops();
    c.indexer_f32 = indexer[0].tflops();
    c.indexer_fp8 = indexer[1].tflops();
    c.indexer_fp8_accumulate = indexer[2].tflops();
    c.kda = kda.tflops();
    c.topk_ps_per_pair = topk_pairs > 0 ? topk.ms * 1e9 / topk_pairs : 0.0;
    c.copy_gbps = memory.ms > 0 ? bytes / (memory.ms * 1e-3) / 1e9 : 0.0;
    return c;
}

Workload bench_workload(const BenchRun& run) {
    Workload w;
    w.fp8_weights = run.fp8_weights;
    w.fp8_attention = run.fp8_attention;
    w.fp8_index_k = run.dsa_fp8_indexer;
    w.dsa_fp8_accumulate = run.dsa_fp8_accumulate;
    return w;
}

Result<double> predict_run_ms(const loader::ModelConfig& m, const Cluster& c, const BenchRun& run) {
    return compute_ms(m, c, bench_workload(run), run.layer_begin, run.layer_end, run.prefix, run.tokens);
}

std::string rates_toml(const ClassRates& r) {
    std::ostringstream os;
    os << "[rates]\n" << std::setprecision(4);
    const std::pair<const char*, double> rows[] = {{"gemm", r.gemm},
                                                   {"gemm_fp8", r.gemm_fp8},
                                                   {"experts", r.experts},
                                                   {"experts_half_rows", r.experts_half_rows},
                                                   {"experts_fp8", r.experts_fp8},
                                                   {"experts_fp8_half_rows", r.experts_fp8_half_rows},
                                                   {"attention", r.attention},
                                                   {"attention_fp8", r.attention_fp8},
                                                   {"sparse_attention", r.sparse_attention},
                                                   {"indexer_f32", r.indexer_f32},
                                                   {"indexer_fp8", r.indexer_fp8},
                                                   {"indexer_fp8_accumulate", r.indexer_fp8_accumulate},
                                                   {"kda", r.kda},
                                                   {"topk_ps_per_pair", r.topk_ps_per_pair},
                                                   {"copy_gbps", r.copy_gbps}};
    for (const auto& [key, v] : rows) {
        if (v > 0) os << key << " = " << v << "\n";
    }
    return os.str();
}

}  // namespace penstock::planner
