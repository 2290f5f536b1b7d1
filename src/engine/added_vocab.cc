// Added-token matching; see added_vocab.h.
#include "engine/added_vocab.h"

#include <algorithm>
#include <cctype>

#include "engine/regex.h"
#include "engine/utf8.h"

namespace penstock::engine {

namespace {

// Rust regex \w: Alphabetic, marks, decimal digits, connector punctuation, joiners (approximated by categories).
bool is_word_char(char32_t cp) {
    if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) != 0 || cp == '_';
    static const auto kWord = Regex::compile(R"(^[\p{L}\p{M}\p{Nd}\p{Nl}\p{Pc}\x{200C}\x{200D}]$)");
    if (!kWord.ok()) return false;  // built without PCRE2: non-ASCII characters never count as word characters
    std::string s;
    utf8::append(&s, cp);
    std::vector<std::pair<size_t, size_t>> m;
    return (*kWord)->find_all(s, &m).ok() && !m.empty();
}

char32_t last_char(std::string_view s) {
    size_t i = s.size() - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    char32_t cp = 0;
    utf8::decode(s, i, &cp);
    return cp;
}

char32_t first_char(std::string_view s) {
    char32_t cp = 0;
    utf8::decode(s, 0, &cp);
    return cp;
}

// Start of the run of White_Space characters that ends `s` (s.size() when none).
size_t trailing_space_start(std::string_view s) {
    size_t end = s.size();
    while (end > 0) {
        size_t i = end - 1;
        while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
        char32_t cp = 0;
        utf8::decode(s, i, &cp);
        if (!utf8::is_white_space(cp)) break;
        end = i;
    }
    return end;
}

// Length of the run of White_Space characters that starts `s`.
size_t leading_space_length(std::string_view s) {
    size_t pos = 0;
    while (pos < s.size()) {
        char32_t cp = 0;
        const size_t n = utf8::decode(s, pos, &cp);
        if (!utf8::is_white_space(cp)) break;
        pos += n;
    }
    return pos;
}

}  // namespace

void AddedVocab::Trie::insert(std::string_view s, int32_t token) {
    int32_t node = 0;
    for (unsigned char b : s) {
        auto& ch = nodes[static_cast<size_t>(node)].children;
        auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& e, unsigned char x) { return e.first < x; });
        if (it != ch.end() && it->first == b) {
            node = it->second;
            continue;
        }
        const auto next = static_cast<int32_t>(nodes.size());
        ch.insert(it, {b, next});
        nodes.emplace_back();
        node = next;
    }
    nodes[static_cast<size_t>(node)].token = token;  // a later duplicate content wins
}

int32_t AddedVocab::Trie::longest_at(std::string_view text, size_t pos, size_t* len) const {
    int32_t node = 0, best = -1;
    for (size_t i = pos; i < text.size(); ++i) {
        const auto b = static_cast<unsigned char>(text[i]);
        const auto& ch = nodes[static_cast<size_t>(node)].children;
        auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& e, unsigned char x) { return e.first < x; });
        if (it == ch.end() || it->first != b) break;
        node = it->second;
        if (nodes[static_cast<size_t>(node)].token >= 0) {
            best = nodes[static_cast<size_t>(node)].token;
            *len = i + 1 - pos;
        }
    }
    return best;
}

AddedVocab::AddedVocab(std::vector<AddedToken> tokens, const Normalizer& normalizer) : tokens_(std::move(tokens)) {
    for (size_t i = 0; i < tokens_.size(); ++i) {
        AddedToken& t = tokens_[i];
        t.decoded = t.normalized ? normalizer.apply(t.content) : t.content;
        if (t.content.empty()) continue;
        if (t.normalized) {
            normalized_.insert(t.decoded, static_cast<int32_t>(i));
        } else {
            raw_.insert(t.content, static_cast<int32_t>(i));
        }
    }
}

// `tokenizers` find_matches().
std::vector<Piece> AddedVocab::split(std::string_view s, bool normalized) const {
    const Trie& trie = normalized ? normalized_ : raw_;
    std::vector<Piece> out;
    size_t start_offset = 0;
    for (size_t pos = 0; pos < s.size();) {
        size_t len = 0;
        const int32_t t = trie.longest_at(s, pos, &len);
        if (t < 0) {
            ++pos;
            continue;
        }
        const AddedToken& tok = tokens_[static_cast<size_t>(t)];
        size_t start = pos, stop = pos + len;
        pos = stop;  // matches never overlap: the search resumes after this one (even when it is discarded)
        if (tok.single_word) {
            const bool start_space = start == 0 || !is_word_char(last_char(s.substr(0, start)));
            const bool stop_space = stop == s.size() || !is_word_char(first_char(s.substr(stop)));
            if (!start_space || !stop_space) continue;
        }
        if (tok.lstrip) start = std::max(trailing_space_start(s.substr(0, start)), start_offset);
        if (tok.rstrip) stop += leading_space_length(s.substr(stop));
        if (start < start_offset) start = start_offset;  // a previous rstrip consumed the spaces (see engine.md)
        if (start_offset < start) out.push_back({start_offset, start, -1});
        out.push_back({start, stop, tok.id});
        start_offset = stop;
        pos = std::max(pos, stop);
    }
    if (start_offset < s.size()) out.push_back({start_offset, s.size(), -1});
    return out;
}

}  // namespace penstock::engine
