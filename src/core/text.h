// Small text helpers shared by the streaming matchers (stop strings in the engine, tool-call and reasoning markup in
// the server): what a matcher must hold back at the end of the text it has so far.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace penstock {

// ' ', '\t', '\n', '\r' (the whitespace of JSON and of the markup models write).
constexpr bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The length of the longest tail of `text` that is a proper prefix of one of `needles` (each convertible to
// std::string_view; empty ones never match): the bytes to hold back until the next ones say whether a needle starts
// there.
template <typename Needles>
size_t held_prefix_tail(std::string_view text, const Needles& needles) {
    size_t best = 0;
    for (std::string_view needle : needles) {
        if (needle.empty()) continue;
        for (size_t len = std::min(text.size(), needle.size() - 1); len > best; --len) {
            if (text.substr(text.size() - len) == needle.substr(0, len)) {
                best = len;
                break;
            }
        }
    }
    return best;
}

}  // namespace penstock
