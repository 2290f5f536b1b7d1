// Decision pinning: records a forward's discrete choices and replays them in another run, so that a bf16 (or any
// backend's) forward can be compared with the fp32 reference on the same choices. The choices are the MoE top-k expert
// ids (after noaux_tc group limiting) and the DSA indexer's top-k key positions, keyed by (layer, request id, absolute
// position), so a recording made with one chunking replays under any other. A test and diagnostic path: models call it
// only when ModelOptions::decisions is set (one pointer test per MoE layer / DSA full layer otherwise).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "kernels/ops.h"
#include "loader/model_config.h"
#include "models/forward_batch.h"

namespace penstock::models {

class DecisionPins;

// Where a MoE block routes: the layer and the batch whose tokens are the rows of its input (every row, in batch order:
// no context parallelism). pins == nullptr (the default) turns the hook off.
struct DecisionSite {
    DecisionPins* pins = nullptr;
    int64_t layer = 0;
    const ForwardBatch* batch = nullptr;
};

class DecisionPins final {
public:
    enum class Mode : uint8_t {
        kRecord,   // store every decision (a later one at the same key replaces the earlier)
        kCompare,  // count the decisions that differ from the recording; change nothing
        kPin,      // count them and replace each with the recorded one
    };
    enum class Kind : uint8_t { kMoeExperts, kDsaTopk };

    struct Counts {
        int64_t decisions = 0;  // rows seen
        int64_t flips = 0;      // rows whose own choice (as a set) differs from the recording (compare / pin)
    };

    // An empty recorder for `config`'s model.
    static DecisionPins recorder(const loader::ModelConfig& config);
    // Reads a recording for replay (`mode` kCompare or kPin). InvalidArgument when the file was recorded on another
    // model_type or config.json (a fingerprint of the whole file), or is not a decision file; errors name the path.
    [[nodiscard]] static Result<DecisionPins> load(const std::filesystem::path& path, const loader::ModelConfig& config,
                                                   Mode mode);
    // Writes the recording (safetensors: keys [n, 3] i64 (layer, request, position) and ids [n, k] i32 per kind,
    // tokens [n, 3] i64 (request, position, token id); metadata: format, model_type, config fingerprint).
    [[nodiscard]] Status save(const std::filesystem::path& path) const;

    // The MoE hook, right after kernels::moe_routing of site.layer: records, compares or replaces routing.topk_ids
    // [n, top_k] i32 (n = site.batch's tokens), recomputing routing.topk_weights at replaced rows from
    // routing.logits and routing.bias as moe_routing does (scores at the ids, normalised, scaled). Views on ctx's
    // device; ids are read back through kernels::transfer.
    void moe(const DecisionSite& site, const kernels::MoeRoutingParams& routing, const kernels::Context& ctx);
    // The DSA hook, right after the indexer's selection of full layer `layer`: key_pos [batch tokens, top_k] i32
    // (ascending key positions, -1 padded). Rows that see <= top_k keys are no decision and are left alone.
    void dsa_topk(const ForwardBatch& batch, int64_t layer, const TensorView& key_pos, const kernels::Context& ctx);

    Mode mode() const { return mode_; }
    Counts counts(Kind kind) const { return kind == Kind::kMoeExperts ? moe_counts_ : dsa_counts_; }
    int64_t recorded(Kind kind) const;
    // The first error a hook met (a decision missing from the recording, another prompt's token at a recorded
    // position, a batch the hook cannot key); hooks do nothing after it. The caller checks it after the forward.
    const Status& status() const { return status_; }
    // "moe: D decisions, F flips; dsa: ..." for logs.
    std::string summary() const;

    // Test access: the recorded ids at a key (nullptr when absent), and replacing them.
    const std::vector<int32_t>* find(Kind kind, int64_t layer, int64_t request_id, int64_t position) const;
    void set(Kind kind, int64_t layer, int64_t request_id, int64_t position, std::vector<int32_t> ids);

private:
    using Key = std::tuple<int64_t, int64_t, int64_t>;  // (layer, request id, position)
    struct RowKey {
        int64_t request_id, position;
        int32_t token;
    };

    DecisionPins() = default;
    // Keys of the batch's rows in batch order; false (and status_ set) when a token contradicts the recording.
    bool row_keys(const ForwardBatch& batch, std::vector<RowKey>* rows);
    // Records / compares one row's choice `own` (width k); returns the recorded row to substitute, or nullptr.
    const std::vector<int32_t>* visit(Kind kind, int64_t layer, const RowKey& row, const int32_t* own, int64_t k);
    void fail(Status s);

    Mode mode_ = Mode::kRecord;
    std::string model_type_;
    std::string fingerprint_;
    std::map<Key, std::vector<int32_t>> moe_, dsa_;
    std::map<std::tuple<int64_t, int64_t>, int32_t> tokens_;  // (request, position) -> token id
    Counts moe_counts_, dsa_counts_;
    Status status_;
};

}  // namespace penstock::models
