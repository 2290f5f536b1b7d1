// Two-ended settings: values both ends of a pipeline link must agree on, all-gathered across the pipeline group at
// start-up. A kStage0Wins setting that differs takes stage 0's value everywhere, with a warning naming it; a kFatal
// setting that differs (messages would pair wrongly: protocol, model shape, dtype) fails start-up with an error
// naming the setting and the disagreeing stages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "loader/model_config.h"
#include "parallel/communicator.h"

namespace penstock::parallel {

enum class Agreement : uint8_t { kStage0Wins, kFatal };

struct TwoEndedSetting {
    std::string name;   // as the user knows it, e.g. "--mla-form"
    int64_t value = 0;  // an integer encoding (enum index, size, or a fingerprint)
    Agreement agreement = Agreement::kFatal;
};

struct ConsensusResult {
    std::vector<int64_t> values;        // the agreed value of each setting, in order
    std::vector<std::string> warnings;  // one per overridden kStage0Wins setting (on the stages that were overridden)
};

// Collective over `group` (every rank must pass the same setting names in the same order).
[[nodiscard]] Result<ConsensusResult> agree_settings(Communicator& group, const std::vector<TwoEndedSetting>& settings);

// A stable 63-bit fingerprint of a string (FNV-1a), for settings such as the model identity.
int64_t fingerprint(const std::string& text);

// The settings every pipeline start-up agrees on first, both fatal on mismatch: the stage message protocol version and
// the model's identity (type, hidden size, layers, vocabulary).
std::vector<TwoEndedSetting> pipeline_identity_settings(const loader::ModelConfig& config);

// Collective over `world`: OK only when `local` is OK on every rank, so that no rank goes on to wait for a peer that
// gave up (e.g. a backend or a stage that failed to start). A local failure comes back as is, a peer's as
// FailedPrecondition naming `what`.
[[nodiscard]] Status agree_started(Communicator& world, const Status& local, const std::string& what);

}  // namespace penstock::parallel
