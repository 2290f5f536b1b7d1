// penstock_model_bench: the engine's own forward (models/ + runtime::ModelRunner, the code `penstock forward` and
// `penstock serve` run) on a slice of layers [A, B) of a real-dimension config (../shared/configs), with
// `--load-format dummy` weights generated on the GPU (models::ModelOptions::dummy_weights_seed): the per-layer numbers
// of PERF.md for every family, including the GLM-5.3 DSA layer and the Kimi K3 KDA and MLA layers, measured on exactly
// what serves requests (no hand-composed copy of the layer).
//
// One request; for each --tokens T: the prefix (--prefix P tokens, built by untimed chunks of at most T) is written
// first, then the chunk of T tokens at prefix P runs --warmup + --reps times (the paged caches rewrite the same
// positions, so every rep does the same work); a stage that does not start at layer 0 gets seeded random hidden rows
// (and, for K3, AttnRes bank rows) instead of the embedding. Each rep prepares the chunk (pages bound, layout uploaded,
// seeded rows filled) and synchronises, then times the forward (ModelRunner::run_layers) to its synchronise: the
// torch baselines also make their inputs before the clock starts. Prints one JSON line per (T, P): median / min ms of
// the forward, "median_ms_with_setup" (the preparation included: the measure before session 43),
// "median_host_enqueue_ms" (the host's time to enqueue the forward, before its synchronise), input tokens/s, per-layer
// ms, and the peak device memory.
// Energy: NVML's total-energy counter of the device (read through dlopen, so no NVML header or link is needed; absent
// when the library or the counter is not there) around the timed reps (their preparation included) gives
// "energy_j_per_rep" (joules per chunk of the layer range) and "mean_power_w". At 16K tokens the real-dimension layers
// run at the H200's 700 W limit (docs/perf/2026-12-01-grouped-gemm-dyn.md): there a kernel that gets faster without
// using less energy only lowers the clock for the rest of the layer, so layer A/Bs compare joules as well as
// milliseconds. The counter updates every few milliseconds: use enough reps (the default 5 x 50 ms is coarse).
//
// --breakdown: after the timed reps, --reps more reps run with a kernels::Profiler on the runner (kernels/profile.h:
// CUDA events around the named scopes of each layer's forward, read after the rep's synchronise), so the headline
// times above are never profiled. Per scope path ("layer.attn.core", summed over its instances in the rep, e.g. every
// layer of the range): the median over reps of ms, its share of the "layer" scope, and "(other)" rows for the time
// of a scope outside its children. Printed as a table and added to the JSON row as "breakdown".
//
// --fp8-weights M1[,M2]: the block-FP8 weight mode of each model load (models::Fp8Weights: auto | native | dequant);
// with a list, the layers are loaded and timed once per mode in the same process (e.g. dequant,native: the bf16
// layer beside the native FP8 one), each row naming its resolved mode ("fp8_weights").
//
//   penstock_model_bench --config glm-5.3.json --layers 3:4 --tokens 4096,16384 [--prefix 0] [--reps 5]
//                        [--warmup 1] [--mla-form mha|absorbed] [--dsa-fp8-indexer] [--dsa-fp8-accumulate]
//                        [--breakdown] [--json out.json]
//                        [--model-name NAME] [--fp8-weights auto|native|dequant[,...]] [--fp8-attention]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/energy_counter.h"
#include "kernels/backend.h"
#include "kernels/cuda/allocator.h"
#include "kernels/profile.h"
#include "kernels/random_hash.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "models/model.h"
#include "penstock_git_commit.h"  // generated at build time (cmake/git_commit.cmake)
#include "runtime/model_runner.h"

namespace penstock::bench {
namespace {

using nlohmann::json;

struct Options {
    std::string config;
    std::string model_name;
    int64_t layer_begin = 0;
    int64_t layer_end = 1;
    std::vector<int64_t> tokens{4096};
    std::vector<int64_t> prefixes{0};
    int reps = 5;
    int warmup = 1;
    std::string mla_form = "mha";
    bool dsa_fp8_indexer = false;
    bool dsa_fp8_accumulate = false;
    int64_t dsa_logits_budget_mib = 0;  // 0: the backend default
    bool fp8_attention = false;
    std::vector<std::string> fp8_weights{"auto"};
    bool breakdown = false;
    std::string json_path;
    uint64_t seed = 20261130;
};

std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
    return out;
}

int usage(const char* argv0) {
    std::fprintf(
        stderr,
        "usage: %s --config FILE.json --layers A:B [--tokens 4096,16384] [--prefix 0,65536] [--reps 5]\n"
        "          [--warmup 1] [--mla-form mha|absorbed] [--dsa-fp8-indexer] [--dsa-fp8-accumulate] [--breakdown]\n"
        "          [--json OUT]\n"
        "          [--model-name NAME] [--seed S] [--fp8-weights auto|native|dequant[,...]] [--fp8-attention]\n"
        "          [--dsa-logits-budget-mib N]   (0: the backend's default, SPEC §3's share of free memory)\n",
        argv0);
    return 2;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// One scope path's medians over the profiled reps (ms: the path's instances summed within a rep).
struct ScopeRow {
    std::string path;  // "layer.moe.experts", or "<parent>.(other)" for a parent's time outside its children
    int depth = 0;
    int64_t count = 0;  // instances per rep
    double median_ms = 0.0;
};

// Per-rep totals (kernels::aggregate of each profiled rep) -> rows in tree order (a parent, its "(other)" row, then
// its children, each child in order of first appearance), medians over reps.
std::vector<ScopeRow> breakdown_rows(const std::vector<std::vector<kernels::ProfileTotal>>& reps) {
    std::vector<std::string> order;  // paths by first appearance
    std::map<std::string, int> depth;
    std::map<std::string, std::vector<double>> ms;
    std::map<std::string, int64_t> count;
    std::map<std::string, std::vector<std::string>> children;
    auto parent_of = [](const std::string& path) {
        const size_t dot = path.rfind('.');
        return dot == std::string::npos ? std::string() : path.substr(0, dot);
    };
    for (const auto& rep : reps) {
        std::map<std::string, double> child_sum;
        for (const kernels::ProfileTotal& t : rep) {
            if (!depth.contains(t.path)) {
                order.push_back(t.path);
                depth[t.path] = t.depth;
                count[t.path] = t.count;
                children[parent_of(t.path)].push_back(t.path);
            }
            ms[t.path].push_back(t.ms);
            if (t.depth > 0) child_sum[parent_of(t.path)] += t.ms;
        }
        for (const kernels::ProfileTotal& t : rep) {
            if (child_sum.contains(t.path)) ms[t.path + ".(other)"].push_back(t.ms - child_sum[t.path]);
        }
    }
    std::vector<ScopeRow> rows;
    auto visit = [&](auto&& self, const std::string& path) -> void {
        rows.push_back({.path = path, .depth = depth[path], .count = count[path], .median_ms = median(ms[path])});
        const auto kids = children.find(path);
        if (kids == children.end()) return;
        const std::string other = path + ".(other)";
        rows.push_back({.path = other, .depth = depth[path] + 1, .count = count[path], .median_ms = median(ms[other])});
        for (const std::string& child : kids->second) self(self, child);
    };
    for (const std::string& root : children[std::string()]) visit(visit, root);
    return rows;
}

int run_mode(const Options& o, const loader::ModelConfig& cfg, kernels::Backend& backend, const std::string& fp8,
             json* all);

int run(const Options& o) {
    std::ifstream in(o.config);
    if (!in) {
        std::fprintf(stderr, "cannot read %s\n", o.config.c_str());
        return 2;
    }
    Result<json> doc = loader::parse_json_text(
        std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), o.config);
    if (!doc.ok()) {
        std::fprintf(stderr, "%s\n", doc.status().to_string().c_str());
        return 2;
    }
    Result<loader::ModelConfig> config = loader::parse_model_config(*doc);
    if (!config.ok()) {
        std::fprintf(stderr, "%s: %s\n", o.config.c_str(), config.status().to_string().c_str());
        return 2;
    }
    Result<std::unique_ptr<kernels::Backend>> backend = kernels::make_backend("cuda", 0);
    if (!backend.ok()) {
        std::fprintf(stderr, "%s\n", backend.status().to_string().c_str());
        return 2;
    }
    json all = json::array();
    for (const std::string& fp8 : o.fp8_weights) {
        const int rc = run_mode(o, *config, **backend, fp8, &all);
        if (rc != 0) return rc;
    }
    if (!o.json_path.empty()) std::ofstream(o.json_path) << all.dump(1) << "\n";
    return 0;
}

// One model load (fp8 weight mode `fp8`) and every (T, prefix) row of it, appended to `all`.
int run_mode(const Options& o, const loader::ModelConfig& cfg, kernels::Backend& backend, const std::string& fp8,
             json* all) {
    const loader::ModelConfig* config = &cfg;
    kernels::Backend* const backend_ptr = &backend;
    const kernels::Context placement = backend.context(nullptr);
    models::ModelOptions mo;
    mo.placement = placement;
    mo.dtype = DType::kBF16;
    mo.mla_form = o.mla_form == "absorbed" ? models::MlaForm::kAbsorbed : models::MlaForm::kMha;
    mo.dummy_weights_seed = o.seed;
    mo.dsa_fp8_indexer = o.dsa_fp8_indexer;
    mo.dsa_fp8_accumulate = o.dsa_fp8_accumulate;
    mo.dsa_logits_budget_bytes = o.dsa_logits_budget_mib << 20;
    if (const Status st = models::check_option_combinations(mo); !st.ok()) {
        std::fprintf(stderr, "%s\n", st.to_string().c_str());
        return 2;
    }
    mo.fp8_attention = o.fp8_attention;
    Result<models::Fp8Weights> fp8_mode = models::parse_fp8_weights(fp8);
    if (!fp8_mode.ok()) {
        std::fprintf(stderr, "%s\n", fp8_mode.status().to_string().c_str());
        return 2;
    }
    mo.fp8_weights = *fp8_mode;
    Result<models::Fp8Weights> resolved = models::resolve_fp8_weights(*config, mo);
    if (!resolved.ok()) {
        std::fprintf(stderr, "%s\n", resolved.status().to_string().c_str());
        return 2;
    }
    const std::string fp8_name = models::fp8_weights_name(*resolved);
    const loader::LayerRange range{o.layer_begin, o.layer_end};
    const auto t_load = std::chrono::steady_clock::now();
    Result<std::unique_ptr<models::Model>> model =
        models::load_model(*config, loader::Checkpoint::none(), range, mo, nullptr);
    if (!model.ok()) {
        std::fprintf(stderr, "load: %s\n", model.status().to_string().c_str());
        return 2;
    }
    backend.synchronize();
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    const int64_t longest =
        *std::max_element(o.tokens.begin(), o.tokens.end()) + *std::max_element(o.prefixes.begin(), o.prefixes.end());
    runtime::RunnerOptions ro;
    ro.n_pages = longest / kv_cache::kPageSize + 2;
    ro.backend = backend_ptr;
    runtime::ModelRunner runner(std::move(*model), ro);
    const models::Model& m = runner.model();
    const int64_t hidden = config->hidden_size;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    std::fprintf(stderr,
                 "# %s layers [%lld, %lld) loaded (dummy weights, fp8 weights %s) in %.1f s; device memory used %.1f "
                 "GiB\n",
                 o.model_name.c_str(), static_cast<long long>(o.layer_begin), static_cast<long long>(o.layer_end),
                 fp8_name.c_str(), load_s, static_cast<double>(total_b - free_b) / (1 << 30));

    int cuda_device = 0;
    cudaGetDevice(&cuda_device);
    const EnergyCounter energy(cuda_device);
    int64_t request = 0;
    for (int64_t prefix : o.prefixes) {
        for (int64_t T : o.tokens) {
            const int64_t id = request++;
            auto chunk = [&](int64_t p0, int64_t n) {
                models::ForwardBatch b;
                models::SeqChunk c;
                c.request_id = id;
                c.prefix_len = p0;
                c.prompt_len = prefix + T;
                c.logits = models::LogitsMode::kNone;
                c.token_ids.resize(static_cast<size_t>(n));
                for (int64_t i = 0; i < n; ++i) {
                    c.token_ids[static_cast<size_t>(i)] =
                        static_cast<int32_t>((p0 + i) * 7919 % std::max<int64_t>(config->vocab_size, 1));
                }
                b.seqs.push_back(std::move(c));
                return b;
            };
            // A chunk's inputs: its pages bound, its layout on the device and, for a stage that does not start at layer
            // 0, the seeded hidden (and AttnRes bank) rows; synchronised, so that the timed forward starts on an idle
            // device as the torch baselines' events do (their inputs are made before the clock starts too).
            auto prepare = [&](models::ForwardBatch* b, models::BatchLayout* layout,
                               models::Activations* act) -> Status {
                PENSTOCK_RETURN_IF_ERROR(runner.bind(b));
                *layout = runner.make_layout(*b);
                const kernels::Context ctx = runner.context();
                const int64_t n = layout->n_tokens;
                if (!m.is_first_stage()) {
                    act->hidden = Tensor::empty({n, hidden}, DType::kBF16, kernels::allocator_of(ctx));
                    kernels::fill_random({.out = act->hidden, .seed = o.seed + 1, .mean = 0.0f, .stddev = 1.0f}, ctx);
                    const int64_t bank = m.bank_rows_before(config->num_hidden_layers);
                    if (bank > 0) {
                        // the stream's dtype, as the model's own bank (models/forward_batch.h)
                        act->bank = Tensor::empty({n, bank, hidden}, DType::kBF16, kernels::allocator_of(ctx));
                        kernels::fill_random({.out = act->bank, .seed = o.seed + 2, .mean = 0.0f, .stddev = 1.0f}, ctx);
                    }
                }
                runner.synchronize();
                return ok_status();
            };
            // The forward of a prepared chunk, synchronised: the timed part.
            // host_ms (optional): how long the host took to enqueue the forward, up to the final synchronize. Well
            // under the forward's time, the device never waits on launches (a CUDA graph would not help); near it,
            // the host is the bound or a host synchronisation inside the forward exposes the launches after it.
            auto forward = [&](const models::ForwardBatch& b, const models::BatchLayout& layout,
                               models::Activations* act, double* host_ms = nullptr) {
                const auto h0 = std::chrono::steady_clock::now();
                runner.run_layers(b, layout, act);
                if (host_ms != nullptr) {
                    *host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count();
                }
                runner.synchronize();
            };
            auto run_chunk = [&](models::ForwardBatch* b) -> Status {
                models::BatchLayout layout;
                models::Activations act;
                PENSTOCK_RETURN_IF_ERROR(prepare(b, &layout, &act));
                forward(*b, layout, &act);
                return ok_status();
            };
            // The prefix, in chunks of at most T tokens (untimed).
            for (int64_t p0 = 0; p0 < prefix; p0 += T) {
                models::ForwardBatch b = chunk(p0, std::min(T, prefix - p0));
                const Status st = run_chunk(&b);
                if (!st.ok()) {
                    std::fprintf(stderr, "prefix chunk at %lld: %s\n", static_cast<long long>(p0),
                                 st.to_string().c_str());
                    return 1;
                }
            }
            std::vector<double> ms;        // the forward alone
            std::vector<double> ms_setup;  // with the chunk's preparation (binding, layout, seeded inputs) before it
            std::vector<double> ms_host;   // the host's enqueue of the forward (forward's host_ms)
            double mj0 = -1.0;
            std::chrono::steady_clock::time_point timed0;
            for (int r = 0; r < o.warmup + o.reps; ++r) {
                if (r == o.warmup) {
                    mj0 = energy.read_mj();
                    timed0 = std::chrono::steady_clock::now();
                }
                models::ForwardBatch b = chunk(prefix, T);
                models::BatchLayout layout;
                models::Activations act;
                const auto s0 = std::chrono::steady_clock::now();
                const Status st = prepare(&b, &layout, &act);
                if (!st.ok()) {
                    std::fprintf(stderr, "chunk: %s\n", st.to_string().c_str());
                    return 1;
                }
                const auto t0 = std::chrono::steady_clock::now();
                double host_ms = 0.0;
                forward(b, layout, &act, &host_ms);
                const auto t1 = std::chrono::steady_clock::now();
                if (r >= o.warmup) {
                    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
                    ms_host.push_back(host_ms);
                    ms_setup.push_back(std::chrono::duration<double, std::milli>(t1 - s0).count());
                }
            }
            const double mj1 = energy.read_mj();
            const double timed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - timed0).count();
            // Profiled reps (--breakdown): the same chunk with the runner's context carrying a profiler.
            std::vector<ScopeRow> scopes;
            if (o.breakdown) {
                kernels::Profiler profiler(Device::kCUDA);
                runner.set_profiler(&profiler);
                std::vector<std::vector<kernels::ProfileTotal>> per_rep;
                for (int r = 0; r < o.reps; ++r) {
                    models::ForwardBatch b = chunk(prefix, T);
                    profiler.clear();
                    const Status st = run_chunk(&b);  // synchronises before returning
                    if (!st.ok()) {
                        std::fprintf(stderr, "profiled chunk: %s\n", st.to_string().c_str());
                        return 1;
                    }
                    per_rep.push_back(kernels::aggregate(profiler.collect()));
                }
                runner.set_profiler(nullptr);
                scopes = breakdown_rows(per_rep);
            }
            runner.release(id);
            cudaMemGetInfo(&free_b, &total_b);
            const double med = median(ms);
            const int64_t n_layers = o.layer_end - o.layer_begin;
            json row{{"model", o.model_name},
                     {"layers", {o.layer_begin, o.layer_end}},
                     {"tokens", T},
                     {"prefix", prefix},
                     {"mla_form", o.mla_form},
                     {"dsa_fp8_indexer", o.dsa_fp8_indexer},
                     {"dsa_fp8_accumulate", o.dsa_fp8_accumulate},
                     {"dsa_logits_budget_mib", o.dsa_logits_budget_mib},
                     {"fp8_attention", o.fp8_attention},
                     {"fp8_weights", fp8_name},
                     {"median_ms", med},
                     {"min_ms", *std::min_element(ms.begin(), ms.end())},
                     {"median_ms_with_setup", median(ms_setup)},
                     {"median_host_enqueue_ms", median(ms_host)},
                     {"ms_per_layer", med / static_cast<double>(n_layers)},
                     {"input_tok_per_s", static_cast<double>(T) / (med / 1e3)},
                     {"reps", o.reps},
                     {"device_mem_used_gib", static_cast<double>(total_b - free_b) / (1 << 30)},
                     {"load_s", load_s},
                     {"commit", PENSTOCK_GIT_COMMIT}};
            if (mj0 >= 0.0 && mj1 > mj0) {
                row["energy_j_per_rep"] = (mj1 - mj0) / 1e3 / o.reps;
                row["mean_power_w"] = (mj1 - mj0) / 1e3 / timed_s;
            }
            if (o.breakdown) {
                double layer_ms = 0.0;
                for (const ScopeRow& s : scopes) {
                    if (s.path == "layer") layer_ms = s.median_ms;
                }
                json rows = json::array();
                std::fprintf(stderr,
                             "# breakdown %s fp8 weights %s T=%lld prefix=%lld: \"layer\" scopes %.2f ms (wall %.2f "
                             "ms, %.2f with the chunk's setup)\n",
                             o.model_name.c_str(), fp8_name.c_str(), static_cast<long long>(T),
                             static_cast<long long>(prefix), layer_ms, med, median(ms_setup));
                std::fprintf(stderr, "#   %-44s %6s %10s %7s\n", "scope", "count", "ms", "share");
                for (const ScopeRow& s : scopes) {
                    const double share = layer_ms > 0.0 ? s.median_ms / layer_ms : 0.0;
                    const size_t dot = s.path.rfind('.');
                    const std::string leaf = dot == std::string::npos ? s.path : s.path.substr(dot + 1);
                    std::fprintf(stderr, "#   %*s%-*s %6lld %10.3f %6.1f%%\n", 2 * s.depth, "", 44 - 2 * s.depth,
                                 leaf.c_str(), static_cast<long long>(s.count), s.median_ms, 100.0 * share);
                    rows.push_back({{"scope", s.path},
                                    {"depth", s.depth},
                                    {"count", s.count},
                                    {"median_ms", s.median_ms},
                                    {"share", share}});
                }
                row["breakdown"] = rows;
                row["breakdown_layer_ms"] = layer_ms;
            }
            std::printf("%s\n", row.dump().c_str());
            std::fflush(stdout);
            all->push_back(row);
        }
    }
    return 0;
}

}  // namespace
}  // namespace penstock::bench

int main(int argc, char** argv) {
    penstock::bench::Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--config") {
            o.config = next();
        } else if (a == "--layers") {
            const std::string v = next();
            const size_t c = v.find(':');
            if (c == std::string::npos) return penstock::bench::usage(argv[0]);
            o.layer_begin = std::stoll(v.substr(0, c));
            o.layer_end = std::stoll(v.substr(c + 1));
        } else if (a == "--tokens") {
            o.tokens = penstock::bench::parse_list(next());
        } else if (a == "--prefix") {
            o.prefixes = penstock::bench::parse_list(next());
        } else if (a == "--reps") {
            o.reps = std::max(1, std::atoi(next().c_str()));
        } else if (a == "--warmup") {
            o.warmup = std::max(0, std::atoi(next().c_str()));
        } else if (a == "--mla-form") {
            o.mla_form = next();
        } else if (a == "--fp8-weights") {
            o.fp8_weights.clear();
            std::stringstream ss(next());
            std::string item;
            while (std::getline(ss, item, ',')) o.fp8_weights.push_back(item);
        } else if (a == "--dsa-fp8-indexer") {
            o.dsa_fp8_indexer = true;
        } else if (a == "--dsa-fp8-accumulate") {
            o.dsa_fp8_accumulate = true;
        } else if (a == "--dsa-logits-budget-mib") {
            o.dsa_logits_budget_mib = std::max<int64_t>(0, std::atoll(next().c_str()));
        } else if (a == "--fp8-attention") {
            o.fp8_attention = true;
        } else if (a == "--breakdown") {
            o.breakdown = true;
        } else if (a == "--json") {
            o.json_path = next();
        } else if (a == "--model-name") {
            o.model_name = next();
        } else if (a == "--seed") {
            o.seed = std::strtoull(next().c_str(), nullptr, 10);
        } else {
            return penstock::bench::usage(argv[0]);
        }
    }
    if (o.config.empty() || o.tokens.empty() || o.prefixes.empty() || o.fp8_weights.empty()) {
        return penstock::bench::usage(argv[0]);
    }
    if (o.model_name.empty()) o.model_name = o.config;
    return penstock::bench::run(o);
}
