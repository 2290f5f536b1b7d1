// Tokenizer encode / decode / DecodeStream; loading lives in tokenizer_load.cc and tiktoken_load.cc. The encode
// pipeline is that of `tokenizers` TokenizerImpl::encode_single_sequence for a BPE model: raw added tokens split
// first, each remaining piece normalized and split by the normalized added tokens, pre-tokenized into words, each
// word through BPE, then the post-processor when add_special_tokens is set. A tiktoken tokenizer runs the same
// pipeline (special tokens, Kimi's regex, tiktoken's merges) on each part Kimi's encode() cuts the text into.
#include <algorithm>

#include "engine/tokenizer_impl.h"
#include "engine/utf8.h"

namespace penstock::engine {

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;

namespace {

// Python's str.isspace(), which Kimi's encode() uses to cut runs: Unicode White_Space plus U+001C..U+001F
// (bidirectional class B or S).
bool python_isspace(char32_t cp) { return utf8::is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F); }

// The parts Kimi's encode() (tokenization_kimi.py) gives tiktoken, each encoded on its own: chunks of 400,000
// characters, each cut before the character that would make a run of whitespace or non-whitespace characters
// longer than 25,000 (the reference's guards against tiktoken failing on very long input). Lookaheads and merges
// never cross a cut. `text` is valid UTF-8.
std::vector<std::string_view> kimi_parts(std::string_view text) {
    constexpr size_t kChunkChars = 400'000;
    constexpr size_t kMaxRunChars = 25'000;
    std::vector<std::string_view> parts;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t start = pos, chars = 0, run = 0;
        bool space = false;
        while (pos < text.size() && chars < kChunkChars) {
            char32_t cp = 0;
            const size_t n = utf8::decode(text, pos, &cp);
            const bool now = python_isspace(cp);
            if (chars == 0) space = now;
            if (now != space) {
                space = now;
                run = 1;
            } else if (++run > kMaxRunChars) {
                parts.push_back(text.substr(start, pos - start));
                start = pos;
                run = 1;
            }
            pos += n;
            ++chars;
        }
        parts.push_back(text.substr(start, pos - start));
    }
    return parts;
}

}  // namespace

Status Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>* ids) const {
    std::vector<std::string> words;
    for (const Piece& raw : added.split(text, /*normalized=*/false)) {
        if (raw.id >= 0) {
            ids->push_back(raw.id);
            continue;
        }
        const std::string_view sub = text.substr(raw.begin, raw.end - raw.begin);
        const std::string normalized = normalizer.is_identity() ? std::string(sub) : normalizer.apply(sub);
        for (const Piece& piece : added.split(normalized, /*normalized=*/true)) {
            if (piece.id >= 0) {
                ids->push_back(piece.id);
                continue;
            }
            words.clear();
            PENSTOCK_RETURN_IF_ERROR(
                pre_tokenizer.apply(normalized.substr(piece.begin, piece.end - piece.begin), &words));
            for (const std::string& w : words) model.tokenize(w, ids);
        }
    }
    return ok_status();
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
    if (auto bad = utf8::first_invalid(text)) {
        return invalid_argument("encode: input is not valid UTF-8 (invalid byte 0x" +
                                std::string(1, "0123456789ABCDEF"[static_cast<unsigned char>(text[*bad]) >> 4]) +
                                std::string(1, "0123456789ABCDEF"[static_cast<unsigned char>(text[*bad]) & 15]) +
                                " at offset " + std::to_string(*bad) + " of " + std::to_string(text.size()) + ")");
    }
    std::vector<int32_t> ids;
    if (impl_->tiktoken) {  // special tokens in the text are matched (allowed_special="all"); nothing is added
        for (std::string_view part : kimi_parts(text)) PENSTOCK_RETURN_IF_ERROR(impl_->encode_text(part, &ids));
        return ids;
    }
    PENSTOCK_RETURN_IF_ERROR(impl_->encode_text(text, &ids));
    if (!add_special_tokens) return ids;
    for (const PostProcessStep& step : impl_->post) {
        std::vector<int32_t> out;
        for (const PostProcessStep::Item& item : step.single) {
            const auto& src = item.is_sequence ? ids : item.ids;
            out.insert(out.end(), src.begin(), src.end());
        }
        ids = std::move(out);
    }
    return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
        auto it = impl_->added_by_id.find(id);
        if (it != impl_->added_by_id.end()) {
            const AddedToken& t = impl_->added.tokens()[it->second];
            if (!(skip_special_tokens && t.special)) tokens.push_back(t.decoded);
        } else if (const std::string* t = impl_->model.id_to_token(id)) {
            // A model token whose text equals a special added token's content is skipped too (`tokenizers` checks
            // the token string; Kimi's decode skips by id only, and tiktoken tokens are raw bytes).
            auto c = impl_->tiktoken ? impl_->added_by_content.end() : impl_->added_by_content.find(*t);
            const bool special = c != impl_->added_by_content.end() && is_special(c->second);
            if (!(skip_special_tokens && special)) tokens.push_back(*t);
        }
    }
    return impl_->decoder.decode(std::move(tokens));
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    auto it = impl_->added_by_content.find(std::string(token));
    if (it != impl_->added_by_content.end()) return it->second;
    if (!impl_->tiktoken) return impl_->model.token_to_id(token);
    std::string bytes;  // the GPT-2 alphabet form back to the raw bytes
    for (size_t pos = 0; pos < token.size();) {
        const size_t n = utf8::valid_sequence_length(token, pos);
        if (n == 0) return std::nullopt;
        char32_t cp = 0;
        utf8::decode(token, pos, &cp);
        const int b = utf8::unicode_to_byte(cp);
        if (b < 0) return std::nullopt;
        bytes.push_back(static_cast<char>(b));
        pos += n;
    }
    return impl_->model.token_to_id(bytes);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
    auto it = impl_->added_by_id.find(id);
    if (it != impl_->added_by_id.end()) return impl_->added.tokens()[it->second].decoded;
    const std::string* t = impl_->model.id_to_token(id);
    if (t == nullptr) return std::nullopt;
    if (!impl_->tiktoken) return *t;
    std::string mapped;
    for (unsigned char b : *t) mapped += utf8::byte_to_unicode()[b];
    return mapped;
}

bool Tokenizer::is_special(int32_t id) const {
    auto it = impl_->added_by_id.find(id);
    return it != impl_->added_by_id.end() && impl_->added.tokens()[it->second].special;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

DecodeStream::DecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

namespace {

bool ends_with_replacement(const std::string& s) { return s.ends_with(utf8::kReplacement); }

// The longest common prefix of a and b that ends on a code point boundary of b (both valid UTF-8).
size_t common_prefix(const std::string& a, const std::string& b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    while (n > 0 && n < b.size() && (static_cast<unsigned char>(b[n]) & 0xC0) == 0x80) --n;
    return n;
}

}  // namespace

// `tokenizers` step_decode_stream: decode the window of ids, emit what extends the previous window's text once it
// does not end in U+FFFD (an incomplete character), then slide the window.
std::string DecodeStream::step(int32_t id) {
    if (prefix_.empty() && !ids_.empty()) {
        std::string p = tokenizer_.decode(ids_, skip_special_tokens_);
        if (!ends_with_replacement(p)) {
            prefix_ = std::move(p);
            prefix_index_ = ids_.size();
        }
    }
    ids_.push_back(id);
    const std::string s = tokenizer_.decode(ids_, skip_special_tokens_);
    if (s.size() <= prefix_.size() || ends_with_replacement(s)) return "";
    // `tokenizers` reports InvalidPrefix when the window's text does not extend the previous text (a decoder that
    // rewrites earlier text); here the differing tail is emitted instead.
    const size_t keep = s.starts_with(prefix_) ? prefix_.size() : common_prefix(prefix_, s);
    std::string out = s.substr(keep);
    const size_t new_prefix_index = ids_.size() - prefix_index_;
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
    prefix_ = tokenizer_.decode(ids_, skip_special_tokens_);
    prefix_index_ = new_prefix_index;
    return out;
}

std::string DecodeStream::flush() {
    const std::string s = tokenizer_.decode(ids_, skip_special_tokens_);
    std::string out;
    if (s.size() > prefix_.size()) out = s.substr(s.starts_with(prefix_) ? prefix_.size() : common_prefix(prefix_, s));
    ids_.clear();
    prefix_.clear();
    prefix_index_ = 0;
    return out;
}

}  // namespace penstock::engine
