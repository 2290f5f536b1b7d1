// Regex: a compiled Unicode-aware pattern (PCRE2 with UTF + UCP) for the tokenizer's Split pre-tokenizers, with the
// Oniguruma spellings used in tokenizer.json files translated (\uHHHH). Immutable after compile(), so one instance
// may be shared by concurrent encode() calls (each call brings its own match data).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace penstock::engine {

class Regex final {
public:
    // A pattern written for Oniguruma (what the `tokenizers` package uses). InvalidArgument when the pattern does
    // not compile; Unimplemented when Penstock was built without PCRE2.
    [[nodiscard]] static Result<std::shared_ptr<const Regex>> compile(std::string_view pattern);
    // A literal string (Split's {"String": ...} pattern).
    [[nodiscard]] static Result<std::shared_ptr<const Regex>> literal(std::string_view text);

    // All non-overlapping matches in `text` (valid UTF-8), left to right, as byte ranges [begin, end). An empty
    // match is reported and the search resumes one code point later. Errors (match limits) are returned.
    [[nodiscard]] Status find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

    const std::string& pattern() const { return pattern_; }

    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

private:
    Regex() = default;
    std::string pattern_;
    void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace penstock::engine
