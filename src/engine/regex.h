// Regex: a compiled Unicode-aware pattern (PCRE2 with UTF + UCP) for the tokenizer's pre-tokenizers, with the
// Oniguruma spellings used in tokenizer.json files translated (\uHHHH, \s), and the Rust regex spellings of
// tiktoken patterns (script properties, class intersections). Immutable after compile(), so one instance may be
// shared by concurrent encode() calls (each call brings its own match data).
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
    // A pattern written for Rust's regex / fancy-regex (what `tiktoken` uses, e.g. Kimi's pat_str). On top of the
    // translation above: \p{Script} means the Script property (PCRE2 reads a bare script name as
    // Script_Extensions), and a class intersection [A&&[B]] becomes a lookahead on B before the class [A].
    // Unimplemented for the class set operations that are not translated (see translate_rust in regex.cc).
    [[nodiscard]] static Result<std::shared_ptr<const Regex>> compile_rust(std::string_view pattern);
    // The PCRE2 pattern compile_rust() compiles (both translations applied); for tests.
    [[nodiscard]] static Result<std::string> translate_rust(std::string_view pattern);
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
    // Compiles an already translated pattern; `pattern` is what error messages and pattern() show.
    [[nodiscard]] static Result<std::shared_ptr<const Regex>> compile_pcre2(const std::string& translated,
                                                                            std::string_view pattern);
    std::string pattern_;
    void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace penstock::engine
