// Two-ended settings consensus over a communicator.
#include "parallel/consensus.h"

#include "parallel/pipeline.h"

namespace penstock::parallel {

int64_t fingerprint(const std::string& text) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : text) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return static_cast<int64_t>(h >> 1);
}

Result<ConsensusResult> agree_settings(Communicator& group, const std::vector<TwoEndedSetting>& settings) {
    const auto n = static_cast<int64_t>(settings.size());
    const int size = group.size();
    // Row r of the gathered table: [n settings' values..., fingerprint of the setting names] of group rank r.
    std::vector<int64_t> mine(static_cast<size_t>(n + 1));
    std::string names;
    for (int64_t i = 0; i < n; ++i) {
        mine[static_cast<size_t>(i)] = settings[static_cast<size_t>(i)].value;
        names += settings[static_cast<size_t>(i)].name + ";";
    }
    mine[static_cast<size_t>(n)] = fingerprint(names);
    const int64_t row = n + 1;
    const int64_t rows = size;
    Tensor in = Tensor::empty({1, row}, DType::kI64);
    std::copy(mine.begin(), mine.end(), in.ptr<int64_t>());
    Tensor all = Tensor::empty({rows, row}, DType::kI64);
    PENSTOCK_RETURN_IF_ERROR(group.all_gather(all, in));
    const int64_t* t = all.ptr<const int64_t>();
    for (int r = 1; r < size; ++r) {
        if (t[r * row + n] != t[n]) {
            return failed_precondition("pipeline stages disagree on the list of two-ended settings (stage " +
                                       std::to_string(r) + " runs a different Penstock build?)");
        }
    }
    ConsensusResult out;
    for (int64_t i = 0; i < n; ++i) {
        const TwoEndedSetting& s = settings[static_cast<size_t>(i)];
        const int64_t stage0 = t[i];
        std::string differing;
        for (int r = 1; r < size; ++r) {
            if (t[r * row + i] != stage0) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
        }
        if (!differing.empty() && s.agreement == Agreement::kFatal) {
            return failed_precondition("setting " + s.name + " differs between pipeline stages (stage 0 vs stage " +
                                       differing + "); it must be the same on every stage");
        }
        if (!differing.empty() && s.value != stage0) {
            out.warnings.push_back("setting " + s.name + " differs from stage 0's; using stage 0's value");
        }
        out.values.push_back(stage0);
    }
    return out;
}

std::vector<TwoEndedSetting> pipeline_identity_settings(const loader::ModelConfig& c) {
    return {{"stage message protocol", kStageVersion, Agreement::kFatal},
            {"--model (type, hidden size, layers, vocab)",
             fingerprint(c.model_type + "/" + std::to_string(c.hidden_size) + "/" + std::to_string(c.num_hidden_layers) +
                         "/" + std::to_string(c.vocab_size)),
             Agreement::kFatal}};
}

Status agree_started(Communicator& world, const Status& local, const std::string& what) {
    Tensor failed = Tensor::from_i32({1}, std::vector<int32_t>{local.ok() ? 0 : 1});
    PENSTOCK_RETURN_IF_ERROR(world.all_reduce(failed, ReduceOp::kMax));
    if (!local.ok()) return local;
    if (failed.ptr<int32_t>()[0] != 0) return failed_precondition("another rank's " + what + " failed to start");
    return ok_status();
}

}  // namespace penstock::parallel
