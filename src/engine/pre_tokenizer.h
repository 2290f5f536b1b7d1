// PreTokenizer: tokenizer.json's "pre_tokenizer" as a flat list of steps (Sequence flattened), each splitting every
// piece produced by the previous step. Supported: ByteLevel (add_prefix_space, use_regex with GPT-2's pattern; maps
// bytes to the byte-level alphabet), Split (Regex or String pattern, behaviors Removed / Isolated /
// MergedWithPrevious / MergedWithNext / Contiguous, invert), Sequence. Immutable after parse; apply() is const.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/json_util.h"
#include "engine/regex.h"

namespace penstock::engine {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer final {
public:
    // `v` is the "pre_tokenizer" value (null: no pre-tokenization). Unimplemented for other types.
    [[nodiscard]] static Result<PreTokenizer> from_json(const nlohmann::json& v, const JsonPath& path);
    // tiktoken's pre-tokenization: the words are the matches of `regex`, left to right; text between matches is
    // dropped (a Split with behavior Removed and invert).
    static PreTokenizer matches_only(std::shared_ptr<const Regex> regex);

    // Splits one piece of input text (valid UTF-8) into words for the model; empty words are dropped.
    [[nodiscard]] Status apply(std::string text, std::vector<std::string>* words) const;

private:
    struct Step {
        enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
        std::shared_ptr<const Regex> regex;  // Split's pattern, or GPT-2's for ByteLevel with use_regex (else null)
        SplitBehavior behavior = SplitBehavior::kIsolated;
        bool invert = false;
        bool add_prefix_space = false;
    };
    [[nodiscard]] static Status parse(const nlohmann::json& v, const JsonPath& path, int depth,
                                      std::vector<Step>* steps);
    [[nodiscard]] static Status split(const Step& step, const std::string& text, std::vector<std::string>* out);

    std::vector<Step> steps_;
};

}  // namespace penstock::engine
