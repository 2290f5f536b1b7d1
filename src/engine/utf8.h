// UTF-8 helpers for the tokenizer: validation, lossy decoding with Rust's String::from_utf8_lossy semantics (each
// maximal invalid subpart becomes one U+FFFD), code point iteration, White_Space, and the GPT-2 byte-level alphabet.
// Pure functions over byte strings; no state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace penstock::engine::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence starting at s[pos], or 0 when the bytes there are not a valid sequence
// (overlong forms, surrogates, code points above U+10FFFF and truncated sequences are invalid).
size_t valid_sequence_length(std::string_view s, size_t pos);

// Byte offset of the first invalid sequence, or nullopt when `s` is valid UTF-8.
std::optional<size_t> first_invalid(std::string_view s);

// `s` with every maximal invalid subpart replaced by U+FFFD (Rust from_utf8_lossy, Unicode "maximal subparts").
std::string lossy(std::string_view s);

// Decodes the code point of the valid sequence at s[pos] and returns its length. Precondition: s is valid at pos.
size_t decode(std::string_view s, size_t pos, char32_t* cp);

void append(std::string* out, char32_t cp);

// Unicode White_Space (Rust char::is_whitespace, regex \s).
bool is_white_space(char32_t cp);

// GPT-2 byte-level alphabet: byte -> the UTF-8 of its printable stand-in code point.
const std::array<std::string, 256>& byte_to_unicode();
// The byte a stand-in code point encodes, or -1 when `cp` is not in the alphabet.
int unicode_to_byte(char32_t cp);

}  // namespace penstock::engine::utf8
