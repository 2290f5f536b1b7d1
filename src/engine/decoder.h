// Decoder: tokenizer.json's "decoder" as a flat chain of steps over the token strings (Sequence flattened), then
// joined. Supported: ByteLevel, ByteFallback, Fuse, Strip, Replace (String or Regex pattern), Sequence; a null
// decoder joins tokens with " " as `tokenizers` does. Output is always valid UTF-8 (invalid bytes become U+FFFD).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/json_util.h"
#include "engine/regex.h"

namespace penstock::engine {

class Decoder final {
public:
    [[nodiscard]] static Result<Decoder> from_json(const nlohmann::json& v, const JsonPath& path);
    // tiktoken's decode: the tokens are raw bytes, concatenated, with invalid UTF-8 replaced by U+FFFD per maximal
    // invalid subpart (what Python's bytes.decode("utf-8", "replace") gives).
    static Decoder raw_bytes();

    std::string decode(std::vector<std::string> tokens) const;

private:
    struct Step {
        enum class Kind { kByteLevel, kByteFallback, kFuse, kStrip, kReplace, kRawBytes } kind = Kind::kFuse;
        std::string content;                 // Strip: the character stripped; Replace: the replacement
        size_t start = 0, stop = 0;          // Strip: at most this many leading / trailing `content` characters
        std::shared_ptr<const Regex> regex;  // Replace: the pattern
    };
    [[nodiscard]] static Status parse(const nlohmann::json& v, const JsonPath& path, int depth,
                                      std::vector<Step>* steps);
    static std::vector<std::string> run(const Step& step, std::vector<std::string> tokens);

    bool present_ = false;
    std::vector<Step> steps_;
};

}  // namespace penstock::engine
