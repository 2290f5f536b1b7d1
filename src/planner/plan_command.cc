// `penstock plan`: reads the model config and the cluster, predicts every layout and prints the tables of SPEC §8.
#include "planner/plan_command.h"

#include <cstdio>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loader/model_config.h"
#include "planner/calibrate.h"

namespace penstock::planner {

void add_plan_options(CLI::App* cmd, PlanArgs* a) {
    cmd->add_option("--model", a->model, "the model's config.json (or a directory holding one)");
    cmd->add_option(
           "--cluster", a->cluster,
           "a built-in profile (" + builtin_cluster_names() + ") or a cluster TOML file (docs/design/planner.md)")
        ->capture_default_str();
    cmd->add_option("--input-len", a->workload.input_len, "prompt tokens per request")->capture_default_str();
    cmd->add_option("--chunked-prefill-size", a->workload.chunk, "chunk tokens")->capture_default_str();
    cmd->add_option("--concurrency", a->workload.concurrency, "requests in flight")->capture_default_str();
    cmd->add_flag("--fp8-weights", a->workload.fp8_weights, "block-FP8 linear weights");
    cmd->add_flag("--fp8-kv", a->workload.fp8_kv, "the latent cache in DeepSeek's FP8 format (656 bytes at 512 / 64)");
    cmd->add_flag("--fp8-index-k", a->workload.fp8_index_k, "DSA index keys in FP8 (132 bytes at 128)");
    cmd->add_flag("--fp8-attention", a->workload.fp8_attention, "the MHA form's attention in FP8 (its class rate)");
    cmd->add_flag("--dsa-fp8-accumulate", a->workload.dsa_fp8_accumulate,
                  "FP8 index keys with e4m3-accumulated logits (with --fp8-index-k; its class rate)");
    cmd->add_option("--calibrate", a->calibrate,
                    "CONFIG=BENCH.json: derive the class rates from penstock_model_bench --breakdown results of "
                    "that model (repeatable); prints them as a cluster file's [rates] table and plans with them");
    cmd->add_option("--check", a->check,
                    "CONFIG=BENCH.json: layer-benchmark results left out of --calibrate; prints the calibrated "
                    "model's time for each against the measured one (repeatable)");
    cmd->add_option("--mem-fraction-static", a->workload.mem_fraction,
                    "fraction of each GPU for weights, KV, activations")
        ->capture_default_str();
    cmd->add_option("--max-kv-chunk-capacity", a->workload.max_kv_chunk_capacity, "MHA-form prefix piece (tokens)")
        ->capture_default_str();
    cmd->add_option("--pp-async-batch-depth", a->workload.async_depth, "extra micro-batch slots")
        ->capture_default_str();
    cmd->add_option("--num-layers", a->num_layers,
                    "plan for the model's first N layers (a partial-depth run, as serve --num-layers)");
    cmd->add_option("--gpus", a->gpus, "GPUs to plan for (default: the whole cluster)");
    cmd->add_option("--max-cp", a->max_cp, "largest context-parallel size to consider")->capture_default_str();
    cmd->add_option("--ep", a->ep, "expert-parallel size: auto (= tp for MoE models) or a number dividing tp")
        ->capture_default_str();
    cmd->add_option("--layout", a->layouts, "only these layouts, each \"pp,tp[,cp]\" (repeatable)");
    cmd->add_option("--long-context", a->long_context,
                    "also explain one prompt of this many tokens (indexer vs backbone FLOPs, KV, chunk trade-offs)");
    cmd->add_option("--top", a->top, "print only the best N layouts");
    cmd->add_option("--json", a->json, "also write the predictions to this file");
}

namespace {

Result<std::vector<Layout>> explicit_layouts(const std::vector<std::string>& texts, int ep, bool ep_auto, bool moe) {
    std::vector<Layout> out;
    for (const std::string& t : texts) {
        std::vector<int> v;
        std::stringstream ss(t);
        std::string part;
        while (std::getline(ss, part, ',')) {
            try {
                size_t used = 0;
                const int x = std::stoi(part, &used);
                if (used != part.size() || x < 1) throw std::invalid_argument(part);
                v.push_back(x);
            } catch (const std::exception&) {
                return invalid_argument("--layout '" + t + "': expected \"pp,tp[,cp]\" with sizes >= 1");
            }
        }
        if (v.size() < 2 || v.size() > 3) return invalid_argument("--layout '" + t + "': expected \"pp,tp[,cp]\"");
        Layout l{.pp = v[0], .tp = v[1], .ep = 1, .cp = v.size() == 3 ? v[2] : 1};
        if (moe) l.ep = ep_auto ? l.tp : ep;
        out.push_back(l);
    }
    return out;
}

std::string fmt(double v, int prec) {
    std::ostringstream os;
    os << std::fixed << std::setprecision(prec) << v;
    return os.str();
}

// --calibrate: reads each CONFIG=BENCH.json pair, prints every run split into the classes with the calibrated
// model's time for it, and the [rates] table.
Result<std::vector<std::pair<loader::ModelConfig, BenchRun>>> read_runs(const std::vector<std::string>& pairs,
                                                                        const char* flag) {
    std::vector<std::pair<loader::ModelConfig, BenchRun>> runs;
    for (const std::string& pair : pairs) {
        const size_t eq = pair.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == pair.size()) {
            return invalid_argument(std::string(flag) + " '" + pair + "': expected CONFIG=BENCH.json");
        }
        PENSTOCK_ASSIGN_OR_RETURN(const loader::ModelConfig m,
                                  loader::load_model_config_dir_or_file(pair.substr(0, eq)));
        PENSTOCK_ASSIGN_OR_RETURN(const std::vector<BenchRun> rs, read_model_bench_json(pair.substr(eq + 1)));
        for (const BenchRun& r : rs) runs.emplace_back(m, r);
    }
    return runs;
}

std::string formats(const BenchRun& r) {
    std::string f = r.fp8_weights ? "fp8 weights" : "bf16 weights";
    if (r.fp8_attention) f += ", fp8 attention";
    if (r.dsa_fp8_indexer) f += r.dsa_fp8_accumulate ? ", fp8 index keys (accumulate)" : ", fp8 index keys";
    return f;
}

// The dense datasheet peak for a class of work in a run, by its operands' format (0: none, or not given): e4m3 for
// FP8 weights (dense linears, routed experts), --fp8-attention and FP8 index keys; 16-bit otherwise (f32 index keys
// too, though each of their dots takes three 16-bit products); none for KDA (CUDA-core and tensor-core work).
double class_peak(const Cluster& c, const BenchRun& r, scheduler::OpClass k) {
    using scheduler::OpClass;
    bool fp8 = false;
    switch (k) {
        case OpClass::kGemm:
        case OpClass::kExperts:
            fp8 = r.fp8_weights;
            break;
        case OpClass::kAttention:
            fp8 = r.fp8_attention;
            break;
        case OpClass::kSparseAttention:
            break;
        case OpClass::kIndexer:
            fp8 = r.dsa_fp8_indexer;
            break;
        case OpClass::kKda:
            return 0;
    }
    return fp8 ? c.peak_fp8_tflops : c.peak_bf16_tflops;
}

// Each run's classes at their own rates (cost-model FLOPs over the class's time) and, where the cluster gives its
// peaks, the share of the peak for the class's format: where each layer's time goes against what the GPU offers.
void print_run_rates(const std::vector<std::pair<loader::ModelConfig, BenchRun>>& runs,
                     const std::vector<RunSplit>& splits, const Cluster& c, std::ostream& out) {
    const bool peaks = c.peak_bf16_tflops > 0 && c.peak_fp8_tflops > 0;
    out << "Each result's classes of work in TFLOP/s (cost-model FLOPs over the class's time)";
    if (peaks) {
        out << ", with the share of " << (c.gpu.empty() ? std::string("the GPU") : c.gpu)
            << "'s dense peak for the class's format (bf16 " << fmt(c.peak_bf16_tflops, 0) << ", e4m3 "
            << fmt(c.peak_fp8_tflops, 0) << " TFLOP/s)";
    }
    out << "\n\n| result | gemm | experts | attention | sparse | indexer | kda |\n|---|---|---|---|---|---|---|\n";
    for (size_t i = 0; i < runs.size(); ++i) {
        const BenchRun& r = runs[i].second;
        const RunSplit& s = splits[i];
        out << "| " << r.source;
        for (size_t k = 0; k < scheduler::kNumOpClasses; ++k) {
            if (s.ms[k] <= 0 || s.flops[k] <= 0) {
                out << " | -";
                continue;
            }
            const double tflops = s.flops[k] / (s.ms[k] * 1e9);
            out << " | " << fmt(tflops, 0);
            const double peak = peaks ? class_peak(c, r, static_cast<scheduler::OpClass>(k)) : 0.0;
            if (peak > 0) out << " (" << fmt(100.0 * tflops / peak, 0) << "%)";
        }
        out << " |\n";
    }
}

Result<ClassRates> run_calibration(const PlanArgs& a, const Cluster& base, std::ostream& out) {
    PENSTOCK_ASSIGN_OR_RETURN(const auto runs, read_runs(a.calibrate, "--calibrate"));
    PENSTOCK_ASSIGN_OR_RETURN(const auto checks, read_runs(a.check, "--check"));
    std::vector<RunSplit> splits;
    PENSTOCK_ASSIGN_OR_RETURN(const ClassRates rates, calibrate(runs, &splits));
    Cluster c = base;
    c.rates = rates;
    out << "# calibration: " << runs.size()
        << " layer-benchmark results, ms by class of work (profiled scopes scaled to the wall median) and "
        << "the calibrated model's time\n\n| result | model | layers | tokens | prefix | formats | gemm | experts | "
           "attention | sparse | indexer | kda | top-k | memory | profiled ms | wall ms | model ms |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (size_t i = 0; i < runs.size(); ++i) {
        const auto& [m, r] = runs[i];
        const RunSplit& s = splits[i];
        PENSTOCK_ASSIGN_OR_RETURN(const double model_ms, predict_run_ms(m, c, r));
        out << "| " << r.source << " | " << m.model_type << " | " << r.layer_begin << "-" << r.layer_end << " | "
            << r.tokens << " | " << r.prefix << " | " << formats(r);
        for (double ms : s.ms) out << " | " << fmt(ms, 2);
        out << " | " << fmt(s.topk_ms, 2) << " | " << fmt(s.memory_ms, 2) << " | " << fmt(s.leaves_ms, 2) << " | "
            << fmt(r.median_ms, 2) << " | " << fmt(model_ms, 2) << " |\n";
    }
    out << "\n";
    print_run_rates(runs, splits, c, out);
    out << "\n" << rates_toml(rates) << "\n";
    if (!checks.empty()) {
        out << "Held out (--check): the layer's wall median against the calibrated model\n\n| result | model | layers "
               "| "
               "tokens | prefix | formats | measured ms | model ms | model / measured |\n"
               "|---|---|---|---|---|---|---|---|---|\n";
        for (const auto& [m, r] : checks) {
            PENSTOCK_ASSIGN_OR_RETURN(const double model_ms, predict_run_ms(m, c, r));
            out << "| " << r.source << " | " << m.model_type << " | " << r.layer_begin << "-" << r.layer_end << " | "
                << r.tokens << " | " << r.prefix << " | " << formats(r) << " | " << fmt(r.median_ms, 2) << " | "
                << fmt(model_ms, 2) << " | " << fmt(model_ms / r.median_ms, 3) << " |\n";
        }
        out << "\n";
    }
    return rates;
}

}  // namespace

Status run_plan(const PlanArgs& a, std::ostream& out) {
    PENSTOCK_ASSIGN_OR_RETURN(Cluster c, cluster_from_arg(a.cluster));
    if (!a.calibrate.empty()) {
        PENSTOCK_ASSIGN_OR_RETURN(c.rates, run_calibration(a, c, out));
        c.notes.push_back("class rates calibrated from the --calibrate results above");
        if (a.model.empty()) return ok_status();
    }
    if (a.model.empty()) return invalid_argument("plan needs --model (or --calibrate)");
    PENSTOCK_ASSIGN_OR_RETURN(loader::ModelConfig m, loader::load_model_config_dir_or_file(a.model));
    if (a.num_layers > 0) {
        PENSTOCK_ASSIGN_OR_RETURN(m, loader::with_num_layers(m, a.num_layers));
    }
    const int gpus = a.gpus > 0 ? a.gpus : c.world();
    if (gpus > c.world()) {
        return invalid_argument("--gpus " + std::to_string(gpus) + ": the cluster has " + std::to_string(c.world()));
    }
    const bool ep_auto = a.ep == "auto";
    int ep = 1;
    if (!ep_auto) {
        try {
            ep = std::stoi(a.ep);
        } catch (const std::exception&) {
            return invalid_argument("--ep must be auto or a number, got '" + a.ep + "'");
        }
        if (ep < 1) return invalid_argument("--ep must be >= 1");
    }
    std::vector<Layout> layouts;
    if (a.layouts.empty()) {
        layouts = enumerate_layouts(m, gpus, a.max_cp, ep_auto, ep);
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(layouts, explicit_layouts(a.layouts, ep, ep_auto, m.n_routed_experts > 0));
    }
    PENSTOCK_ASSIGN_OR_RETURN(const std::vector<Prediction> preds, plan(m, c, a.workload, layouts));

    const Workload& w = a.workload;
    out << "# penstock plan: " << m.model_type << " (" << m.num_hidden_layers << " layers, hidden " << m.hidden_size
        << ") on " << c.name << " (" << c.gpu << ", " << c.nodes << " x " << c.gpus_per_node << ", "
        << fmt(c.memory_gib, 1) << " GiB), " << gpus << " GPUs\n";
    out << "# workload: input " << w.input_len << ", chunk " << w.chunk << ", concurrency " << w.concurrency
        << ", weights " << (w.fp8_weights ? "fp8" : "bf16") << ", kv " << (w.fp8_kv ? "fp8" : "bf16")
        << ", mem fraction " << w.mem_fraction << "\n";
    for (const std::string& n : c.notes) out << "# " << n << "\n";
    out << "\n| layout | fits | max GiB/rank | stage ms (compute + TP + CP + send) | period ms | bottleneck | comm % | "
           "fill | input tok/s | TTFT s |\n|---|---|---|---|---|---|---|---|---|---|\n";
    int shown = 0;
    for (const Prediction& p : preds) {
        if (a.top > 0 && shown >= a.top) break;
        ++shown;
        const StagePrediction& s = p.stages[static_cast<size_t>(p.slowest_stage)];
        out << "| " << p.layout.str() << " | " << (p.fits ? "yes" : "no") << " | " << fmt(p.max_rank_gib, 1) << " | "
            << fmt(s.compute_ms, 1) << " + " << fmt(s.tp_comm_ms, 1) << " + " << fmt(s.cp_comm_ms, 1) << " + "
            << fmt(s.boundary_ms, 1) << " | " << fmt(p.period_ms, 1) << " | " << p.bottleneck << " | "
            << fmt(100.0 * p.comm_share, 0) << " | " << fmt(p.fill, 2) << " | " << fmt(p.input_tok_s, 0) << " | "
            << fmt(p.ttft_s, 2) << " |\n";
    }
    if (!preds.empty()) {
        const Prediction& best = preds.front();
        out << "\nBest: " << best.layout.str() << (best.fits ? "" : " (nothing fits)") << ", stages (layers, GiB = "
            << "weights + KV + activations):";
        for (const StagePrediction& s : best.stages) {
            out << " [" << s.layer_begin << "," << s.layer_end << ") " << fmt(s.weights_gib, 1) << "+"
                << fmt(s.kv_gib, 1) << "+" << fmt(s.activations_gib, 1);
        }
        out << "\n";
    }
    PENSTOCK_ASSIGN_OR_RETURN(const TpCommPatterns t, tp_comm_patterns(m));
    out << "\nTP traffic per token and layer (elements of the hidden H = " << t.hidden << ", latent L = " << t.latent
        << "): all-reduce 2H = " << t.all_reduce << "; reduce-scatter H + all-gather L = " << t.rs_ag << " ("
        << fmt(100.0 * (1.0 - t.rs_ag / t.all_reduce), 0) << "% less)";
    if (t.needs_full_hidden) {
        out << "; this model's "
            << "output gate / KDA layers need the full hidden: 2H + L = " << t.rs_ag_full_hidden << " ("
            << fmt(100.0 * (t.rs_ag_full_hidden / t.all_reduce - 1.0), 0) << "% more than the all-reduce)";
    }
    out << "\n";
    nlohmann::json lcj;
    if (a.long_context > 0) {
        const std::vector<int64_t> sizes{2048, 8192, 32768, 131072};
        PENSTOCK_ASSIGN_OR_RETURN(const LongContext lc, long_context(m, w, a.long_context, sizes));
        out << "\nOne prompt of " << lc.len << " tokens: indexer " << fmt(lc.indexer_pflop, 1) << " PFLOP ("
            << lc.full_indexer_layers << " full layers), backbone " << fmt(lc.backbone_pflop, 1) << " PFLOP, KV "
            << fmt(lc.kv_bytes_per_token, 0) << " bytes/token = " << fmt(lc.kv_gb, 1) << " GB\n";
        out << "| chunk | index-K re-reads GB | logits before slicing GB | activations GB |\n|---|---|---|---|\n";
        for (const ChunkTradeoff& ct : lc.chunks) {
            out << "| " << ct.chunk << " | " << fmt(ct.index_k_reread_gb, 0) << " | " << fmt(ct.logits_peak_gb, 1)
                << " | " << fmt(ct.activation_peak_gb, 2) << " |\n";
        }
        lcj = {{"len", lc.len},
               {"indexer_pflop", lc.indexer_pflop},
               {"backbone_pflop", lc.backbone_pflop},
               {"kv_bytes_per_token", lc.kv_bytes_per_token},
               {"kv_gb", lc.kv_gb}};
    }
    if (!a.json.empty()) {
        nlohmann::json j;
        j["model_type"] = m.model_type;
        j["cluster"] = c.name;
        j["gpus"] = gpus;
        for (const Prediction& p : preds) {
            nlohmann::json stages = nlohmann::json::array();
            for (const StagePrediction& s : p.stages) {
                stages.push_back({{"layers", {s.layer_begin, s.layer_end}},
                                  {"weights_gib", s.weights_gib},
                                  {"kv_gib", s.kv_gib},
                                  {"activations_gib", s.activations_gib},
                                  {"compute_ms", s.compute_ms},
                                  {"tp_comm_ms", s.tp_comm_ms},
                                  {"cp_comm_ms", s.cp_comm_ms},
                                  {"boundary_ms", s.boundary_ms}});
            }
            j["layouts"].push_back({{"pp", p.layout.pp},
                                    {"tp", p.layout.tp},
                                    {"ep", p.layout.ep},
                                    {"cp", p.layout.cp},
                                    {"fits", p.fits},
                                    {"max_rank_gib", p.max_rank_gib},
                                    {"period_ms", p.period_ms},
                                    {"bottleneck", p.bottleneck},
                                    {"comm_share", p.comm_share},
                                    {"fill", p.fill},
                                    {"input_tok_s", p.input_tok_s},
                                    {"ttft_s", p.ttft_s},
                                    {"stages", stages}});
        }
        j["tp_comm"] = {{"all_reduce", t.all_reduce},
                        {"rs_ag", t.rs_ag},
                        {"rs_ag_full_hidden", t.rs_ag_full_hidden},
                        {"needs_full_hidden", t.needs_full_hidden}};
        if (!lcj.is_null()) j["long_context"] = lcj;
        std::ofstream f(a.json);
        if (!f) return Status(StatusCode::kUnavailable, "cannot write " + a.json);
        f << j.dump(2) << "\n";
    }
    return ok_status();
}

}  // namespace penstock::planner
