// Checkpoint directory loading: index parsing, shard selection, per-tensor conversion (optionally on a thread pool).
#include "loader/checkpoint.h"

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/logging.h"
#include "core/thread_pool.h"
#include "loader/model_config.h"
#include "loader/safetensors.h"
#include "loader/weight_convert.h"

namespace penstock::loader {

namespace {

namespace fs = std::filesystem;

constexpr char kIndexFile[] = "model.safetensors.index.json";
constexpr char kSingleFile[] = "model.safetensors";
constexpr std::string_view kScaleSuffix = "_scale_inv";
// compressed-tensors: `X.weight_scale` (FP8 scale, or MXFP4 exponents beside `X.weight_packed`)
constexpr std::string_view kCtScale = ".weight_scale";
constexpr std::string_view kPacked = ".weight_packed";
constexpr std::string_view kGlobalScale = ".weight_global_scale";

bool is_scale_name(std::string_view n) { return n.ends_with(".weight_scale_inv"); }

// "X.weight_packed" -> "X" (empty when n is not a packed name).
std::string_view packed_base(std::string_view n) {
    return n.ends_with(kPacked) ? n.substr(0, n.size() - kPacked.size()) : std::string_view();
}

// Parses the layer index of "model.layers.{i}[.rest]"; false for anything else.
bool layer_index(std::string_view n, int64_t* layer) {
    constexpr std::string_view kPrefix = "model.layers.";
    if (!n.starts_with(kPrefix)) return false;
    n.remove_prefix(kPrefix.size());
    size_t i = 0;
    int64_t v = 0;
    while (i < n.size() && i < 18 && n[i] >= '0' && n[i] <= '9') v = v * 10 + (n[i++] - '0');
    if (i == 0 || (i < n.size() && n[i] != '.')) return false;
    *layer = v;
    return true;
}

// A shard file name from the index must stay inside the model directory.
Status check_shard_name(const std::string& index, const std::string& tensor, const std::string& shard) {
    const fs::path p(shard);
    bool ok = !shard.empty() && p.is_relative();
    for (const auto& part : p) ok = ok && part != "..";
    if (!ok) return invalid_argument(index + ": weight_map['" + tensor + "'] = '" + shard + "' is not a file name");
    return ok_status();
}

// The shards opened by one load() call, each opened at most once and recorded in the stats.
class ShardSet final {
public:
    ShardSet(const fs::path& dir, LoadStats* stats) : dir_(dir), stats_(stats) {}

    [[nodiscard]] Result<const SafetensorsFile*> get(const std::string& shard) {
        auto it = files_.find(shard);
        if (it != files_.end()) return it->second.get();
        PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::open(dir_ / shard));
        stats_->files_opened.push_back(shard);
        stats_->bytes_read += f->header_bytes();
        const SafetensorsFile* p = f.get();
        files_.emplace(shard, std::move(f));
        return p;
    }

private:
    fs::path dir_;
    LoadStats* stats_;
    std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

// How a job's tensor is decoded.
enum class Decode : uint8_t {
    kPlain,      // float cast or raw copy
    kFp8Blocks,  // DeepSeek FP8: weight_scale_inv per block
    kFp8Scaled,  // compressed-tensors FP8: weight_scale per tensor / channel / block
    kMxfp4,      // compressed-tensors MXFP4: weight_packed + weight_scale (e8m0 per 32 columns)
    kMxfp4Fp8,   // the same re-encoded as block FP8 (native FP8 loads): X.weight e4m3 + X.weight_scale_inv
};

// One tensor to produce: its bytes and, when dequantising, its scale's. `name` is the returned name (X.weight for
// an MXFP4 X.weight_packed).
struct Job {
    std::string name;
    const SafetensorsFile* file = nullptr;
    const TensorInfo* info = nullptr;
    const TensorInfo* scale = nullptr;  // set only when dequantising
    const SafetensorsFile* scale_file = nullptr;
    Decode decode = Decode::kPlain;
};

// A job's tensors: the named one, and for kMxfp4Fp8 its block scales (`<name>_scale_inv`) and inexact elements.
struct JobOutput {
    Tensor tensor = {};
    Tensor scale_inv = {};
    int64_t n_inexact = 0;
};

Result<JobOutput> run_job(const Job& job, const LoadOptions& options, int64_t block_n, int64_t block_k) {
    const TensorView v = job.file->view(*job.info);
    if (job.decode == Decode::kMxfp4Fp8) {
        Result<Fp8Blocks> b = mxfp4_to_fp8_blocks(v, job.scale_file->view(*job.scale), block_n, block_k);
        if (!b.ok()) return b.status().with_context(job.file->path().string() + ": tensor '" + job.info->name + "'");
        return JobOutput{
            .tensor = std::move(b->weight), .scale_inv = std::move(b->scale_inv), .n_inexact = b->n_inexact};
    }
    if (job.scale != nullptr) {
        const TensorView sv = job.scale_file->view(*job.scale);
        Result<Tensor> t = job.decode == Decode::kMxfp4 ? dequantize_mxfp4(v, sv, options.target)
                           : job.decode == Decode::kFp8Scaled
                               ? dequantize_fp8_scaled(v, sv, block_n, block_k, options.target)
                               : dequantize_fp8_blocks(v, sv, block_n, block_k, options.target);
        if (!t.ok()) return t.status().with_context(job.file->path().string() + ": tensor '" + job.info->name + "'");
        return JobOutput{.tensor = std::move(t).value()};
    }
    if (is_float_source(v.dtype)) {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor t, convert_float(v, options.target));
        return JobOutput{.tensor = std::move(t)};
    }
    return JobOutput{.tensor = copy_raw(v)};
}

}  // namespace

bool tensor_in_layer_range(std::string_view name, const LayerRange& range, int64_t num_hidden_layers,
                           bool tie_word_embeddings) {
    if (name.starts_with("language_model.")) name.remove_prefix(std::string_view("language_model.").size());
    const bool full = range.begin <= 0 && range.end >= num_hidden_layers;
    const bool last = range.end == num_hidden_layers;
    int64_t layer = 0;
    if (layer_index(name, &layer)) return layer >= range.begin && layer < range.end && layer < num_hidden_layers;
    if (name.starts_with("model.embed_tokens.")) return range.begin == 0 || (tie_word_embeddings && last);
    if (name.starts_with("model.norm.") || name.starts_with("lm_head.")) return last;
    return full;
}

Result<Checkpoint> Checkpoint::open(const std::filesystem::path& model_dir) {
    std::error_code ec;
    if (!fs::is_directory(model_dir, ec)) return not_found("model directory " + model_dir.string() + " not found");
    Checkpoint c;
    c.dir_ = model_dir;
    const fs::path index = model_dir / kIndexFile;
    if (!fs::exists(index, ec)) {
        if (!fs::exists(model_dir / kSingleFile, ec)) {
            return not_found("no " + std::string(kIndexFile) + " or " + kSingleFile + " in " + model_dir.string());
        }
        return c;
    }
    c.indexed_ = true;
    const std::string what = index.string();
    PENSTOCK_ASSIGN_OR_RETURN(const std::string text, read_text_file(index));
    PENSTOCK_ASSIGN_OR_RETURN(const nlohmann::json j, parse_json_text(text, what));
    if (!j.is_object() || !j.contains("weight_map")) return invalid_argument(what + ": missing 'weight_map'");
    const nlohmann::json& wm = j["weight_map"];
    if (!wm.is_object()) return invalid_argument(what + ": 'weight_map' must be an object");
    for (auto it = wm.begin(); it != wm.end(); ++it) {
        if (!it.value().is_string()) {
            return invalid_argument(what + ": weight_map['" + it.key() + "'] must be a string (a shard file name)");
        }
        const std::string shard = it.value().get<std::string>();
        PENSTOCK_RETURN_IF_ERROR(check_shard_name(what, it.key(), shard));
        c.weight_map_.emplace(it.key(), shard);
    }
    return c;
}

std::vector<std::string> Checkpoint::tensor_names() const {
    std::vector<std::string> names;
    if (indexed_) {
        for (const auto& [name, shard] : weight_map_) names.push_back(name);
        return names;
    }
    Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(dir_ / kSingleFile);
    if (!f.ok()) {
        PENSTOCK_LOG_ERROR("{}", f.status().to_string());
        return names;
    }
    for (const TensorInfo& t : (*f)->tensors()) names.push_back(t.name);
    return names;
}

std::vector<std::string> Checkpoint::shard_files() const {
    if (!indexed_) return {kSingleFile};
    std::set<std::string> s;
    for (const auto& [name, shard] : weight_map_) s.insert(shard);
    return {s.begin(), s.end()};
}

Checkpoint Checkpoint::none() {
    Checkpoint c;
    c.indexed_ = true;  // an empty index: nothing to open
    return c;
}

Result<WeightMap> Checkpoint::load(const std::function<bool(std::string_view)>& filter, const LoadOptions& options,
                                   int64_t fp8_block_n, int64_t fp8_block_k, LoadStats* stats) const {
    if (options.target != DType::kF32 && options.target != DType::kBF16) {
        return invalid_argument("load target must be f32 or bf16, got " + std::string(dtype_name(options.target)));
    }
    LoadStats local;
    LoadStats* st = stats ? stats : &local;  // added to, not reset: a model may load in several calls
    ShardSet shards(dir_, st);

    // Tensor name -> shard file: from the index, or from the single file's header (which opens it).
    std::map<std::string, std::string> index;
    if (indexed_) {
        index = weight_map_;
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(const SafetensorsFile* f, shards.get(kSingleFile));
        for (const TensorInfo& t : f->tensors()) index.emplace(t.name, kSingleFile);
    }
    auto locate = [&](const std::string& name) -> Result<std::pair<const SafetensorsFile*, const TensorInfo*>> {
        const std::string& shard = index.at(name);
        PENSTOCK_ASSIGN_OR_RETURN(const SafetensorsFile* f, shards.get(shard));
        const TensorInfo* info = f->find(name);
        if (info == nullptr) {
            return not_found("tensor '" + name + "' is listed in " + kIndexFile + " under '" + shard +
                             "' but absent from " + f->path().string());
        }
        return std::make_pair(f, info);
    };

    // Select, open shards in name order (so files_opened is deterministic), and pair FP8 weights with scales.
    std::vector<Job> jobs;
    std::set<std::string> selected;
    // `X.weight_scale` belongs to `X.weight_packed` (MXFP4) or to an FP8 `X.weight` (compressed-tensors): consumed
    // by it, never returned
    auto ct_scale_owner = [&](std::string_view n) -> Result<bool> {
        if (!n.ends_with(kCtScale)) return false;
        const std::string base(n.substr(0, n.size() - kCtScale.size()));
        if (index.count(base + std::string(kPacked)) != 0) return true;
        if (index.count(base + ".weight") == 0) return false;
        PENSTOCK_ASSIGN_OR_RETURN(auto wloc, locate(base + ".weight"));
        return wloc.second->dtype == DType::kF8E4M3;
    };
    for (const auto& [name, shard] : index) {
        if (options.dequantize_fp8 && is_scale_name(name)) continue;  // consumed by its weight, never returned
        if (!filter(name)) continue;
        PENSTOCK_ASSIGN_OR_RETURN(const bool consumed, ct_scale_owner(name));
        if (!consumed) selected.insert(name);
    }
    // Pairs a job with the scale tensor it is dequantised with.
    auto attach_scale = [&](Job& job, const std::string& scale, Decode decode) -> Status {
        PENSTOCK_ASSIGN_OR_RETURN(auto sloc, locate(scale));
        job.scale_file = sloc.first;
        job.scale = sloc.second;
        job.decode = decode;
        st->bytes_read += job.scale->nbytes();
        return ok_status();
    };
    for (const std::string& name : selected) {
        PENSTOCK_ASSIGN_OR_RETURN(auto loc, locate(name));
        Job job{.name = name, .file = loc.first, .info = loc.second};
        if (const std::string_view base = packed_base(name); !base.empty()) {
            // MXFP4 (compressed-tensors): dequantised into X.weight, or for native FP8 loads (dequantize_fp8 false)
            // re-encoded as block FP8 (X.weight e4m3 + X.weight_scale_inv; mxfp4_to_fp8_blocks)
            const std::string scale = std::string(base) + std::string(kCtScale);
            if (index.count(std::string(base) + std::string(kGlobalScale)) != 0) {
                return unimplemented(loc.first->path().string() + ": tensor '" + name + "' has a '" +
                                     std::string(base) + std::string(kGlobalScale) +
                                     "' (NVFP4); only MXFP4 (e8m0 scales per 32, no global scale) is supported");
            }
            if (index.count(scale) == 0) {
                return invalid_argument(loc.first->path().string() + ": packed FP4 tensor '" + name + "' has no '" +
                                        scale + "'");
            }
            job.name = std::string(base) + ".weight";
            PENSTOCK_RETURN_IF_ERROR(
                attach_scale(job, scale, options.dequantize_fp8 ? Decode::kMxfp4 : Decode::kMxfp4Fp8));
        } else if (job.info->dtype == DType::kF8E4M3) {
            const std::string scale = name + std::string(kScaleSuffix);
            const bool has_scale = index.count(scale) != 0;
            const std::string ct_scale =
                name.ends_with(".weight")
                    ? name.substr(0, name.size() - std::string_view(".weight").size()) + std::string(kCtScale)
                    : std::string();
            if (!has_scale && !ct_scale.empty() && index.count(ct_scale) != 0) {
                // compressed-tensors FP8: always dequantised (the native FP8 kernels take DeepSeek's block layout)
                PENSTOCK_RETURN_IF_ERROR(attach_scale(job, ct_scale, Decode::kFp8Scaled));
            } else if (options.dequantize_fp8) {
                if (!has_scale) {
                    return invalid_argument(loc.first->path().string() + ": FP8 tensor '" + name + "' has no '" +
                                            scale + "' or '" + (ct_scale.empty() ? "X.weight_scale" : ct_scale) +
                                            "' (only scaled FP8 can be dequantised)");
                }
                PENSTOCK_RETURN_IF_ERROR(attach_scale(job, scale, Decode::kFp8Blocks));
            } else if (has_scale && !selected.count(scale)) {
                PENSTOCK_ASSIGN_OR_RETURN(auto sloc, locate(scale));
                jobs.push_back(Job{.name = scale, .file = sloc.first, .info = sloc.second});
                st->bytes_read += sloc.second->nbytes();
            }
        }
        st->bytes_read += job.info->nbytes();
        jobs.push_back(std::move(job));
    }

    // Convert (in parallel over tensors when asked); report the first failure in job order.
    std::vector<JobOutput> out(jobs.size());
    std::vector<Status> errors(jobs.size());
    auto convert = [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            Result<JobOutput> t = run_job(jobs[static_cast<size_t>(i)], options, fp8_block_n, fp8_block_k);
            if (t.ok()) {
                out[static_cast<size_t>(i)] = std::move(t).value();
            } else {
                errors[static_cast<size_t>(i)] = t.status();
            }
        }
    };
    const auto n_jobs = static_cast<int64_t>(jobs.size());
    if (options.n_threads == 1 || n_jobs <= 1) {
        convert(0, n_jobs);
    } else {
        ThreadPool pool(options.n_threads);
        pool.parallel_for(n_jobs, /*grain=*/1, convert);
    }
    WeightMap result;
    result.reserve(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
        if (!errors[i].ok()) return errors[i];
        if (out[i].scale_inv.defined()) {
            if (index.count(jobs[i].name + std::string(kScaleSuffix)) != 0 || index.count(jobs[i].name) != 0) {
                return invalid_argument(jobs[i].file->path().string() + ": '" + jobs[i].info->name +
                                        "' would become '" + jobs[i].name + "' and '" + jobs[i].name +
                                        std::string(kScaleSuffix) + "', which the checkpoint also holds");
            }
            result.emplace(jobs[i].name + std::string(kScaleSuffix), std::move(out[i].scale_inv));
            st->n_mxfp4_fp8_inexact += out[i].n_inexact;
        }
        result.emplace(jobs[i].name, std::move(out[i].tensor));
    }
    st->n_tensors += static_cast<int64_t>(result.size());
    for (const Job& job : jobs) {
        st->n_fp8_block += job.decode == Decode::kFp8Blocks ? 1 : 0;
        st->n_fp8_scaled += job.decode == Decode::kFp8Scaled ? 1 : 0;
        st->n_mxfp4 += job.decode == Decode::kMxfp4 ? 1 : 0;
        st->n_mxfp4_fp8 += job.decode == Decode::kMxfp4Fp8 ? 1 : 0;
    }
    return result;
}

Result<Tensor> Checkpoint::load_one(std::string_view name, const LoadOptions& options, int64_t fp8_block_n,
                                    int64_t fp8_block_k) const {
    PENSTOCK_ASSIGN_OR_RETURN(
        WeightMap m, load([&](std::string_view n) { return n == name; }, options, fp8_block_n, fp8_block_k, nullptr));
    auto it = m.find(std::string(name));
    if (it == m.end()) return not_found("tensor '" + std::string(name) + "' not in checkpoint " + dir_.string());
    return it->second;
}

}  // namespace penstock::loader
