// Decision pinning (models/decision_pins.h): the host side of every hook. Device tensors are read back and written
// through kernels::transfer, so the same code serves the CPU reference and CUDA; nothing here runs unless a model was
// given a DecisionPins.
#include "models/decision_pins.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"

namespace penstock::models {

namespace {

constexpr const char* kFormat = "penstock-decisions/1";

// FNV-1a 64 of the whole config.json (nlohmann dumps object keys sorted, so the text is canonical).
std::string config_fingerprint(const loader::ModelConfig& config) {
    uint64_t h = 1469598103934665603ull;
    for (const char c : config.raw.dump()) {
        h ^= static_cast<uint8_t>(c);
        h *= 1099511628211ull;
    }
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

const char* kind_name(DecisionPins::Kind kind) {
    switch (kind) {
        case DecisionPins::Kind::kMoeExperts:
            return "moe";
        case DecisionPins::Kind::kDsaTopk:
            return "dsa";
    }
    return "?";
}

bool same_set(const int32_t* a, const std::vector<int32_t>& b) {
    std::vector<int32_t> x(a, a + b.size());
    std::vector<int32_t> y = b;
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    return x == y;
}

// A host copy of a device (or host) view.
Tensor to_host(const TensorView& v, const kernels::Context& ctx) {
    Tensor h = Tensor::empty(v.shape_vec(), v.dtype);
    kernels::transfer({.out = h, .in = v}, ctx);
    return h;
}

// moe_routing's weights of one token at the given ids: scores (sigmoid, or softmax over every expert) at the ids,
// normalised by their sum + 1e-20 when norm_topk_prob, times routed_scaling_factor (kernels/ref/moe.cc).
void routing_weights(const kernels::MoeRoutingParams& p, const float* logits, int64_t n_experts, const int32_t* ids,
                     int64_t k, float* weights) {
    std::vector<float> s(static_cast<size_t>(k));
    if (p.scoring == kernels::MoeScoring::kSigmoid) {
        for (int64_t j = 0; j < k; ++j) s[static_cast<size_t>(j)] = 1.0f / (1.0f + std::exp(-logits[ids[j]]));
    } else {
        float max_l = -std::numeric_limits<float>::infinity();
        for (int64_t e = 0; e < n_experts; ++e) max_l = std::max(max_l, logits[e]);
        double sum = 0.0;
        for (int64_t e = 0; e < n_experts; ++e) sum += std::exp(logits[e] - max_l);
        for (int64_t j = 0; j < k; ++j) {
            s[static_cast<size_t>(j)] = static_cast<float>(std::exp(logits[ids[j]] - max_l) / sum);
        }
    }
    float sum = 0.0f;
    for (const float v : s) sum += v;
    const float denom = sum + 1e-20f;
    for (int64_t j = 0; j < k; ++j) {
        float w = s[static_cast<size_t>(j)];
        if (p.norm_topk_prob) w /= denom;
        weights[j] = w * p.routed_scaling_factor;
    }
}

}  // namespace

DecisionPins DecisionPins::recorder(const loader::ModelConfig& config) {
    DecisionPins d;
    d.mode_ = Mode::kRecord;
    d.model_type_ = config.model_type;
    d.fingerprint_ = config_fingerprint(config);
    return d;
}

void DecisionPins::fail(Status s) {
    if (status_.ok()) status_ = std::move(s);
}

int64_t DecisionPins::recorded(Kind kind) const {
    return static_cast<int64_t>(kind == Kind::kMoeExperts ? moe_.size() : dsa_.size());
}

const std::vector<int32_t>* DecisionPins::find(Kind kind, int64_t layer, int64_t request_id, int64_t position) const {
    const auto& table = kind == Kind::kMoeExperts ? moe_ : dsa_;
    const auto it = table.find({layer, request_id, position});
    return it == table.end() ? nullptr : &it->second;
}

void DecisionPins::set(Kind kind, int64_t layer, int64_t request_id, int64_t position, std::vector<int32_t> ids) {
    (kind == Kind::kMoeExperts ? moe_ : dsa_)[{layer, request_id, position}] = std::move(ids);
}

std::string DecisionPins::summary() const {
    const char* mode = mode_ == Mode::kRecord ? "recorded" : mode_ == Mode::kCompare ? "compared" : "pinned";
    auto part = [&](Kind kind) {
        const Counts c = counts(kind);
        return std::string(kind_name(kind)) + " " + std::to_string(c.decisions) + " decisions, " +
               std::to_string(c.flips) + " flips";
    };
    return std::string(mode) + ": " + part(Kind::kMoeExperts) + "; " + part(Kind::kDsaTopk);
}

bool DecisionPins::row_keys(const ForwardBatch& batch, std::vector<RowKey>* rows) {
    rows->clear();
    for (const SeqChunk& s : batch.seqs) {
        for (size_t j = 0; j < s.token_ids.size(); ++j) {
            const RowKey r{.request_id = s.request_id,
                           .position = s.prefix_len + static_cast<int64_t>(j),
                           .token = s.token_ids[j]};
            rows->push_back(r);
            if (mode_ == Mode::kRecord) {
                tokens_[{r.request_id, r.position}] = r.token;
                continue;
            }
            const auto it = tokens_.find({r.request_id, r.position});
            if (it == tokens_.end() || it->second != r.token) {
                fail(invalid_argument(
                    "decision pins: request " + std::to_string(r.request_id) + " position " +
                    std::to_string(r.position) + " holds token " + std::to_string(r.token) + ", the recording " +
                    (it == tokens_.end() ? std::string("has no token there") : "has " + std::to_string(it->second)) +
                    " (recorded on another prompt)"));
                return false;
            }
        }
    }
    return true;
}

const std::vector<int32_t>* DecisionPins::visit(Kind kind, int64_t layer, const RowKey& row, const int32_t* own,
                                                int64_t k) {
    auto& table = kind == Kind::kMoeExperts ? moe_ : dsa_;
    Counts& c = kind == Kind::kMoeExperts ? moe_counts_ : dsa_counts_;
    ++c.decisions;
    const Key key{layer, row.request_id, row.position};
    if (mode_ == Mode::kRecord) {
        table[key].assign(own, own + k);
        return nullptr;
    }
    const auto it = table.find(key);
    const std::string where = std::string(kind_name(kind)) + " decision of layer " + std::to_string(layer) +
                              ", request " + std::to_string(row.request_id) + ", position " +
                              std::to_string(row.position);
    if (it == table.end()) {
        fail(not_found("decision pins: the recording has no " + where));
        return nullptr;
    }
    if (static_cast<int64_t>(it->second.size()) != k) {
        fail(invalid_argument("decision pins: the recorded " + where + " has " + std::to_string(it->second.size()) +
                              " ids, this model chooses " + std::to_string(k)));
        return nullptr;
    }
    if (same_set(own, it->second)) return nullptr;
    ++c.flips;
    return mode_ == Mode::kPin ? &it->second : nullptr;
}

void DecisionPins::moe(const DecisionSite& site, const kernels::MoeRoutingParams& routing,
                       const kernels::Context& ctx) {
    if (!status_.ok()) return;
    const int64_t n = routing.topk_ids.size(0);
    const int64_t k = routing.topk_ids.size(1);
    if (site.batch == nullptr || site.batch->n_tokens() != n) {
        fail(failed_precondition("decision pins: MoE layer " + std::to_string(site.layer) + " routes " +
                                 std::to_string(n) +
                                 " rows, not the whole batch (context parallelism is not supported)"));
        return;
    }
    std::vector<RowKey> rows;
    if (!row_keys(*site.batch, &rows)) return;
    Tensor ids = to_host(routing.topk_ids, ctx);
    Tensor logits;  // host copies, read only when a row is replaced
    Tensor weights;
    const int64_t n_experts = routing.logits.size(1);
    for (int64_t t = 0; t < n; ++t) {
        int32_t* own = ids.ptr<int32_t>() + t * k;
        const std::vector<int32_t>* pinned = visit(Kind::kMoeExperts, site.layer, rows[static_cast<size_t>(t)], own, k);
        if (pinned == nullptr) continue;
        if (!logits.defined()) {
            logits = to_host(routing.logits, ctx);
            weights = to_host(routing.topk_weights, ctx);
        }
        std::copy(pinned->begin(), pinned->end(), own);
        routing_weights(routing, logits.ptr<const float>() + t * n_experts, n_experts, own, k,
                        weights.ptr<float>() + t * k);
    }
    if (weights.defined() && status_.ok()) {
        kernels::transfer({.out = routing.topk_ids, .in = ids}, ctx);
        kernels::transfer({.out = routing.topk_weights, .in = weights}, ctx);
    }
}

void DecisionPins::dsa_topk(const ForwardBatch& batch, int64_t layer, const TensorView& key_pos,
                            const kernels::Context& ctx) {
    if (!status_.ok()) return;
    const int64_t n = key_pos.size(0);
    const int64_t k = key_pos.size(1);
    if (batch.n_tokens() != n) {
        fail(failed_precondition("decision pins: DSA layer " + std::to_string(layer) + " selects for " +
                                 std::to_string(n) + " rows, the batch has " + std::to_string(batch.n_tokens())));
        return;
    }
    std::vector<RowKey> rows;
    if (!row_keys(batch, &rows)) return;
    Tensor pos = to_host(key_pos, ctx);
    bool changed = false;
    int64_t row = 0;
    for (const SeqChunk& s : batch.seqs) {
        for (size_t j = 0; j < s.token_ids.size(); ++j, ++row) {
            if (s.prefix_len + static_cast<int64_t>(j) + 1 <= k) continue;  // sees every key: no choice made
            int32_t* own = pos.ptr<int32_t>() + row * k;
            const std::vector<int32_t>* pinned = visit(Kind::kDsaTopk, layer, rows[static_cast<size_t>(row)], own, k);
            if (pinned == nullptr) continue;
            std::copy(pinned->begin(), pinned->end(), own);
            changed = true;
        }
    }
    if (changed && status_.ok()) kernels::transfer({.out = key_pos, .in = pos}, ctx);
}

// ---------------------------------------------------------------------------------------------------------------
Status DecisionPins::save(const std::filesystem::path& path) const {
    std::vector<Tensor> keep;
    loader::NamedViews views;
    for (const Kind kind : {Kind::kMoeExperts, Kind::kDsaTopk}) {
        const auto& table = kind == Kind::kMoeExperts ? moe_ : dsa_;
        if (table.empty()) continue;
        const auto n = static_cast<int64_t>(table.size());
        const auto k = static_cast<int64_t>(table.begin()->second.size());
        Tensor keys = Tensor::empty({n, 3}, DType::kI64);
        Tensor ids = Tensor::empty({n, k}, DType::kI32);
        int64_t i = 0;
        for (const auto& [key, row] : table) {
            PENSTOCK_CHECK_EQ(static_cast<int64_t>(row.size()), k) << kind_name(kind) << " rows of unequal width";
            int64_t* kp = keys.ptr<int64_t>() + i * 3;
            kp[0] = std::get<0>(key);
            kp[1] = std::get<1>(key);
            kp[2] = std::get<2>(key);
            std::copy(row.begin(), row.end(), ids.ptr<int32_t>() + i * k);
            ++i;
        }
        views.emplace_back(std::string(kind_name(kind)) + ".keys", keys.view());
        views.emplace_back(std::string(kind_name(kind)) + ".ids", ids.view());
        keep.push_back(std::move(keys));
        keep.push_back(std::move(ids));
    }
    if (!tokens_.empty()) {
        Tensor tokens = Tensor::empty({static_cast<int64_t>(tokens_.size()), 3}, DType::kI64);
        int64_t i = 0;
        for (const auto& [key, token] : tokens_) {
            int64_t* tp = tokens.ptr<int64_t>() + i++ * 3;
            tp[0] = std::get<0>(key);
            tp[1] = std::get<1>(key);
            tp[2] = token;
        }
        views.emplace_back("tokens", tokens.view());
        keep.push_back(std::move(tokens));
    }
    return loader::write_safetensors(
        path, views, {{"format", kFormat}, {"model_type", model_type_}, {"config_fingerprint", fingerprint_}});
}

Result<DecisionPins> DecisionPins::load(const std::filesystem::path& path, const loader::ModelConfig& config,
                                        Mode mode) {
    PENSTOCK_CHECK(mode != Mode::kRecord) << "DecisionPins::load is for replay";
    const std::string what = "decision file " + path.string();
    PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<loader::SafetensorsFile> file, loader::SafetensorsFile::open(path));
    PENSTOCK_ASSIGN_OR_RETURN(nlohmann::json meta, loader::parse_json_text(file->metadata_json(), what));
    auto field = [&](const char* name) {
        return meta.contains(name) && meta[name].is_string() ? meta[name].get<std::string>() : std::string();
    };
    if (field("format") != kFormat) {
        return invalid_argument(what + ": not a decision recording (metadata format '" + field("format") +
                                "', expected '" + kFormat + "')");
    }
    DecisionPins d = recorder(config);
    d.mode_ = mode;
    if (field("model_type") != d.model_type_ || field("config_fingerprint") != d.fingerprint_) {
        return invalid_argument(what + " was recorded on model_type '" + field("model_type") + "' (config " +
                                field("config_fingerprint") + "), this model is '" + d.model_type_ + "' (config " +
                                d.fingerprint_ + "): record the decisions on the same checkpoint");
    }
    // Reads an [n, width] tensor of `dtype` into rows (the bytes may be unaligned: memcpy).
    auto rows_of = [&](const std::string& name, DType dtype, int64_t width, std::vector<uint8_t>* out, int64_t* n_rows,
                       int64_t* n_cols) -> Status {
        const loader::TensorInfo* info = file->find(name);
        *n_rows = 0;
        if (info == nullptr) return ok_status();
        if (info->dtype != dtype || info->shape.size() != 2 || (width > 0 && info->shape[1] != width)) {
            return invalid_argument(what + ": tensor '" + name + "' has the wrong dtype or shape");
        }
        *n_rows = info->shape[0];
        *n_cols = info->shape[1];
        const std::span<const uint8_t> bytes = file->bytes(*info);
        out->assign(bytes.begin(), bytes.end());
        return ok_status();
    };
    for (const Kind kind : {Kind::kMoeExperts, Kind::kDsaTopk}) {
        const std::string prefix = kind_name(kind);
        std::vector<uint8_t> kb;
        std::vector<uint8_t> ib;
        int64_t n_keys = 0;
        int64_t n_ids = 0;
        int64_t cols = 0;
        int64_t k = 0;
        PENSTOCK_RETURN_IF_ERROR(rows_of(prefix + ".keys", DType::kI64, 3, &kb, &n_keys, &cols));
        PENSTOCK_RETURN_IF_ERROR(rows_of(prefix + ".ids", DType::kI32, 0, &ib, &n_ids, &k));
        if (n_keys != n_ids) return invalid_argument(what + ": " + prefix + ".keys and .ids differ in rows");
        for (int64_t i = 0; i < n_keys; ++i) {
            int64_t key[3];
            std::memcpy(key, kb.data() + i * 3 * sizeof(int64_t), sizeof(key));
            std::vector<int32_t> ids(static_cast<size_t>(k));
            std::memcpy(ids.data(), ib.data() + i * k * sizeof(int32_t), static_cast<size_t>(k) * sizeof(int32_t));
            d.set(kind, key[0], key[1], key[2], std::move(ids));
        }
    }
    std::vector<uint8_t> tb;
    int64_t n_tokens = 0;
    int64_t cols = 0;
    PENSTOCK_RETURN_IF_ERROR(rows_of("tokens", DType::kI64, 3, &tb, &n_tokens, &cols));
    for (int64_t i = 0; i < n_tokens; ++i) {
        int64_t t[3];
        std::memcpy(t, tb.data() + i * 3 * sizeof(int64_t), sizeof(t));
        d.tokens_[{t[0], t[1]}] = static_cast<int32_t>(t[2]);
    }
    return d;
}

}  // namespace penstock::models
