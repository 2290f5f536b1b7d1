// PCRE2 wrapper; see regex.h. The only user of PCRE2 (through pcre2_abi.h). PENSTOCK_ENABLE_PCRE2=0 (no libpcre2
// at all) builds a stub whose compile() returns Unimplemented, so such a machine still builds (and byte-level
// tokenizers whose pre-tokenizer needs no regex still work).
#include "engine/regex.h"

#include <cctype>

#if PENSTOCK_ENABLE_PCRE2
#include "engine/pcre2_abi.h"
#endif

#include "engine/utf8.h"

namespace penstock::engine {

namespace {

bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// Unicode White_Space, which is what Oniguruma's \s matches (PCRE2 10.42's \s under UCP adds U+180E).
constexpr std::string_view kWhiteSpaceItems =
    R"(\t\n\x0B\f\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

bool is_hex4(std::string_view p, size_t i) {
    return i + 4 <= p.size() && is_hex(p[i]) && is_hex(p[i + 1]) && is_hex(p[i + 2]) && is_hex(p[i + 3]);
}

// Translates the Oniguruma (Ruby syntax) spellings that PCRE2 reads differently: \uHHHH becomes \x{HHHH}; \s and
// \S become explicit White_Space classes (inside a class \s expands to its items; \S inside a class is left to
// PCRE2). Tracks character classes as PCRE2 parses them ("[...]" does not nest, a leading "]" is literal, "[:alpha:]"
// is POSIX) and
// copies every other escape as a pair, so "\\s" (a literal backslash, then "s") is left alone.
std::string translate_oniguruma(std::string_view p) {
    std::string out;
    out.reserve(p.size() + 64);
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            const char e = p[i + 1];
            if (e == 'u' && is_hex4(p, i + 2)) {
                out += "\\x{" + std::string(p.substr(i + 2, 4)) + "}";
                i += 5;
            } else if (e == 's' && in_class) {
                out += kWhiteSpaceItems;
                ++i;
            } else if ((e == 's' || e == 'S') && !in_class) {
                out += e == 's' ? "[" : "[^";
                out += kWhiteSpaceItems;
                out += "]";
                ++i;
            } else {
                out.push_back(c);
                out.push_back(e);
                ++i;
            }
            continue;
        }
        if (c == '[' && in_class) {  // PCRE2 classes do not nest: "[" is literal unless it opens "[:name:]"
            const size_t close = p.substr(i, 2) == "[:" ? p.find(":]", i + 2) : std::string_view::npos;
            if (close != std::string_view::npos) {
                out.append(p.substr(i, close + 2 - i));
                i = close + 1;
                continue;
            }
        } else if (c == '[') {
            in_class = true;
            out.push_back(c);
            if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
            if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);  // "]" first in a class is literal
            continue;
        } else if (c == ']' && in_class) {
            in_class = false;
        }
        out.push_back(c);
    }
    return out;
}

// --- Rust regex (tiktoken) spellings -------------------------------------------------------------------------------

// PCRE2's general category names (and its own \p{Any}, \p{L&}, \p{Xan}...): kept as they are. Every other bare
// property name is a script in the patterns this handles.
bool is_general_category_or_pcre2_special(std::string_view name) {
    return name.size() <= 2 || name == "L&" || name == "Any" || name == "Xan" || name == "Xps" || name == "Xsp" ||
           name == "Xwd" || name == "Xuc" || name.find_first_of(":=") != std::string_view::npos;
}

// Copies the escape at p[i] == '\\' to *out and returns the index after it. \p{Script} / \P{Script} become
// \p{sc:Script}: Rust's regex reads a bare script name as the Script property, PCRE2 (10.40 on) as
// Script_Extensions, which for Han adds CJK punctuation shared with kana and Hangul (U+3001, U+3002...;
// checked with tiktoken: "中文、" is two pieces there).
size_t copy_rust_escape(std::string_view p, size_t i, std::string* out) {
    if (i + 1 >= p.size()) {
        out->push_back('\\');
        return i + 1;
    }
    const char e = p[i + 1];
    if ((e == 'p' || e == 'P') && i + 2 < p.size() && p[i + 2] == '{') {
        const size_t close = p.find('}', i + 3);
        if (close != std::string_view::npos) {
            const std::string_view name = p.substr(i + 3, close - i - 3);
            *out += '\\';
            *out += e;
            *out += '{';
            if (!is_general_category_or_pcre2_special(name)) *out += "sc:";
            *out += name;
            *out += '}';
            return close + 1;
        }
    }
    out->push_back('\\');
    out->push_back(e);
    return i + 2;
}

std::string copy_rust_escapes(std::string_view p) {
    std::string out;
    for (size_t i = 0; i < p.size();) {
        if (p[i] == '\\') {
            i = copy_rust_escape(p, i, &out);
        } else {
            out.push_back(p[i++]);
        }
    }
    return out;
}

// One past the Rust class that opens at p[i] == '[' (classes nest; a ']' first is literal; "[:alpha:]" is an
// item), or npos when it does not close.
size_t rust_class_end(std::string_view p, size_t i) {
    size_t j = i + 1;
    if (j < p.size() && p[j] == '^') ++j;
    if (j < p.size() && p[j] == ']') ++j;
    while (j < p.size()) {
        if (p[j] == '\\') {
            j += 2;
        } else if (p.substr(j, 2) == "[:" && p.find(":]", j + 2) != std::string_view::npos) {
            j = p.find(":]", j + 2) + 2;
        } else if (p[j] == '[') {
            j = rust_class_end(p, j);
            if (j == std::string_view::npos) return j;
        } else if (p[j] == ']') {
            return j + 1;
        } else {
            ++j;
        }
    }
    return std::string_view::npos;
}

// Translates one Rust class p = "[...]". A class without nested classes is copied (escapes rewritten). An
// intersection [A&&B], A plain items and B one nested class, becomes (?:(?=B')[A]): the lookahead checks that the
// next character is in B without consuming it, then [A] consumes it, so the group matches exactly one character in
// A ∩ B, and a quantifier after the class repeats the whole group. Kimi's
//   [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
// becomes
//   (?:(?=[^\p{sc:Han}])[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])
// (PCRE2 10.42 has no class set operations; 10.45's extended classes are not on the target machines.) Other set
// operations (nested unions, negated intersections, several &&, "--", "~~") are Unimplemented.
Result<std::string> translate_rust_class(std::string_view cls, std::string_view pattern) {
    const std::string_view body = cls.substr(1, cls.size() - 2);
    size_t amp = std::string_view::npos;
    size_t n_nested = 0;
    for (size_t j = 0; j < body.size();) {
        if (body[j] == '\\') {
            j += 2;
        } else if (body.substr(j, 2) == "[:" && body.find(":]", j + 2) != std::string_view::npos) {
            j = body.find(":]", j + 2) + 2;
        } else if (body[j] == '[') {
            ++n_nested;
            j = rust_class_end(body, j);
            if (j == std::string_view::npos) return invalid_argument("regex '" + std::string(pattern) + "': bad class");
        } else if (body.substr(j, 2) == "&&" || body.substr(j, 2) == "--" || body.substr(j, 2) == "~~") {
            if (body[j] != '&' || amp != std::string_view::npos) {
                return unimplemented("regex '" + std::string(pattern) + "': class set operation in '" +
                                     std::string(cls) + "' is not supported (only [items&&[class]])");
            }
            amp = j;
            j += 2;
        } else {
            ++j;
        }
    }
    if (amp == std::string_view::npos) {
        if (n_nested > 0) {
            return unimplemented("regex '" + std::string(pattern) + "': nested class in '" + std::string(cls) +
                                 "' is not supported");
        }
        std::string out = "[";  // appended piece by piece: GCC 12's -Wrestrict misfires on chained operator+
        out += copy_rust_escapes(body);
        out += ']';
        return out;
    }
    const std::string_view left = body.substr(0, amp);
    const std::string_view right = body.substr(amp + 2);
    const bool right_is_one_class =
        right.size() >= 2 && right.front() == '[' && rust_class_end(right, 0) == right.size();
    if (left.empty() || left.front() == '^' || left.find('[') != std::string_view::npos || !right_is_one_class ||
        n_nested != 1) {
        return unimplemented("regex '" + std::string(pattern) + "': class intersection '" + std::string(cls) +
                             "' is not supported (only [items&&[class]] with plain items)");
    }
    PENSTOCK_ASSIGN_OR_RETURN(const std::string inner, translate_rust_class(right, pattern));
    std::string out = "(?:(?=";
    out += inner;
    out += ")[";
    out += copy_rust_escapes(left);
    out += "])";
    return out;
}

Result<std::string> translate_rust_syntax(std::string_view p) {
    std::string out;
    out.reserve(p.size() + 64);
    for (size_t i = 0; i < p.size();) {
        if (p[i] == '\\') {
            i = copy_rust_escape(p, i, &out);
        } else if (p[i] == '[') {
            const size_t end = rust_class_end(p, i);
            if (end == std::string_view::npos) {
                return invalid_argument("regex '" + std::string(p) + "': unterminated character class at offset " +
                                        std::to_string(i));
            }
            PENSTOCK_ASSIGN_OR_RETURN(const std::string cls, translate_rust_class(p.substr(i, end - i), p));
            out += cls;
            i = end;
        } else {
            out.push_back(p[i++]);
        }
    }
    return out;
}

}  // namespace

Result<std::string> Regex::translate_rust(std::string_view pattern) {
    PENSTOCK_ASSIGN_OR_RETURN(const std::string rust, translate_rust_syntax(pattern));
    return translate_oniguruma(rust);  // \s / \S: Rust's are Unicode White_Space too
}

Result<std::shared_ptr<const Regex>> Regex::compile(std::string_view pattern) {
    return compile_pcre2(translate_oniguruma(pattern), pattern);
}

Result<std::shared_ptr<const Regex>> Regex::compile_rust(std::string_view pattern) {
    PENSTOCK_ASSIGN_OR_RETURN(const std::string translated, translate_rust(pattern));
    return compile_pcre2(translated, pattern);
}

#if PENSTOCK_ENABLE_PCRE2

Result<std::shared_ptr<const Regex>> Regex::compile_pcre2(const std::string& translated, std::string_view pattern) {
    int error = 0;
    size_t offset = 0;
    pcre2_code_8* code = pcre2_compile_8(reinterpret_cast<const uint8_t*>(translated.data()), translated.size(),
                                         pcre2::kUtf | pcre2::kUcp, &error, &offset, nullptr);
    if (code == nullptr) {
        uint8_t buf[256];
        pcre2_get_error_message_8(error, buf, sizeof(buf));
        return invalid_argument("regex '" + std::string(pattern) + "' does not compile at offset " +
                                std::to_string(offset) + ": " + reinterpret_cast<const char*>(buf));
    }
    pcre2_jit_compile_8(code, pcre2::kJitComplete);  // best effort: the interpreter runs when JIT is unavailable
    std::shared_ptr<Regex> re(new Regex());
    re->pattern_ = std::string(pattern);
    re->code_ = code;
    return std::shared_ptr<const Regex>(std::move(re));
}

Regex::~Regex() { pcre2_code_free_8(static_cast<pcre2_code_8*>(code_)); }

Status Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const {
    matches->clear();
    auto* code = static_cast<pcre2_code_8*>(code_);
    std::unique_ptr<pcre2_match_data_8, void (*)(pcre2_match_data_8*)> md(
        pcre2_match_data_create_from_pattern_8(code, nullptr), pcre2_match_data_free_8);
    if (!md) return resource_exhausted("regex: out of memory for match data");
    const auto* subject = reinterpret_cast<const uint8_t*>(text.data());
    size_t start = 0;
    while (start <= text.size()) {
        int rc = pcre2_match_8(code, subject, text.size(), start, pcre2::kNoUtfCheck, md.get(), nullptr);
        if (rc == pcre2::kErrorJitStackLimit) {  // deep backtracking: retry in the heap-based interpreter
            rc =
                pcre2_match_8(code, subject, text.size(), start, pcre2::kNoUtfCheck | pcre2::kNoJit, md.get(), nullptr);
        }
        if (rc == pcre2::kErrorNoMatch) break;
        if (rc < 0) {
            uint8_t buf[256];
            pcre2_get_error_message_8(rc, buf, sizeof(buf));
            return resource_exhausted("regex '" + pattern_ + "': match failed: " + reinterpret_cast<const char*>(buf));
        }
        const size_t* ov = pcre2_get_ovector_pointer_8(md.get());
        const size_t b = ov[0], e = ov[1];
        if (b > e || e > text.size()) return internal_error("regex '" + pattern_ + "': bad match range");
        matches->emplace_back(b, e);
        if (e > b) {
            start = e;
        } else {
            if (e >= text.size()) break;
            const size_t n = utf8::valid_sequence_length(text, e);
            start = e + (n == 0 ? 1 : n);
        }
    }
    return ok_status();
}

#else  // PENSTOCK_ENABLE_PCRE2

Result<std::shared_ptr<const Regex>> Regex::compile_pcre2(const std::string&, std::string_view pattern) {
    return unimplemented("regex '" + std::string(pattern) +
                         "': Penstock was built without PCRE2 (install libpcre2-dev and reconfigure)");
}

Regex::~Regex() = default;

Status Regex::find_all(std::string_view, std::vector<std::pair<size_t, size_t>>*) const {
    return unimplemented("regex support was not built");
}

#endif  // PENSTOCK_ENABLE_PCRE2

Result<std::shared_ptr<const Regex>> Regex::literal(std::string_view text) {
    if (text.empty()) return compile("(?!)");  // `tokenizers`: an empty string pattern matches nothing
    std::string escaped;
    for (char c : text) {  // escape every ASCII non-alphanumeric; other bytes (UTF-8) are literal in PCRE2
        if (static_cast<unsigned char>(c) < 0x80 && std::isalnum(static_cast<unsigned char>(c)) == 0) {
            escaped.push_back('\\');
        }
        escaped.push_back(c);
    }
    return compile(escaped);
}

}  // namespace penstock::engine
