// Normalizer: tokenizer.json's "normalizer". Supported: null, NFC, NFD and Sequences of them (an empty Sequence is
// the identity). Everything else (NFKC, Lowercase, Replace, Prepend, ...) is Unimplemented at load time.
// Immutable after parse.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/json_util.h"

namespace penstock::engine {

class Normalizer final {
public:
    [[nodiscard]] static Result<Normalizer> from_json(const nlohmann::json& v, const JsonPath& path);

    bool is_identity() const { return steps_.empty(); }
    // `text` (valid UTF-8) normalized.
    std::string apply(std::string_view text) const;

private:
    enum class Kind { kNfc, kNfd };
    [[nodiscard]] static Status parse(const nlohmann::json& v, const JsonPath& path, int depth,
                                      std::vector<Kind>* steps);
    std::vector<Kind> steps_;
};

}  // namespace penstock::engine
