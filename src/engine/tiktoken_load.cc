// Loading a Kimi tiktoken tokenizer (Kimi K2, Kimi Linear, Kimi K3): tiktoken.model (mergeable ranks) and
// tokenizer_config.json (the names of the special tokens after the ranks). The model matches Moonshot's
// tokenization_kimi.py, which builds tiktoken.Encoding(pat_str=Kimi's pattern, mergeable_ranks, special_tokens):
// the pattern is not in any file, so it is fixed here. Every error names the file and the line or field.
#include <unordered_map>
#include <unordered_set>

#include "engine/json_util.h"
#include "engine/tokenizer_impl.h"

namespace penstock::engine {

namespace {

using nlohmann::json;

// Kimi's pat_str (tokenization_kimi.py), in Rust regex syntax as tiktoken's fancy-regex reads it; compile_rust()
// translates the \p{Han} script classes and the [...&&[^\p{Han}]] intersections for PCRE2 (see regex.cc).
// Alternatives: Han runs; a word of letters and marks other than Han whose lowercase part ends it (optionally one
// leading non-letter, non-digit, non-newline character, and an English contraction); an uppercase-led word likewise;
// 1-3 digits; punctuation runs with trailing newlines; newlines with the whitespace before them; whitespace not
// followed by a non-space; other whitespace.
constexpr std::string_view kKimiPattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+)"
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*)"
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

// The reference names num_base .. num_base + num_reserved_special_tokens + 1 (256 + 2 ids after the ranks).
constexpr int32_t kNumSpecialIds = 256 + 2;
constexpr int64_t kMaxId = int64_t{1} << 24;  // Penstock's id bound (json_id)

int base64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

// Standard base64 with '=' padding to a multiple of 4 characters; nullopt when malformed.
std::optional<std::string> base64_decode(std::string_view s) {
    if (s.empty() || s.size() % 4 != 0) return std::nullopt;
    size_t pad = 0;
    while (pad < 2 && s.size() > pad && s[s.size() - 1 - pad] == '=') ++pad;
    std::string out;
    out.reserve(s.size() / 4 * 3);
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < s.size() - pad; ++i) {
        const int v = base64_value(s[i]);
        if (v < 0) return std::nullopt;
        acc = (acc << 6) | static_cast<uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<char>((acc >> bits) & 0xFF));
        }
    }
    if ((acc & ((1u << bits) - 1)) != 0) return std::nullopt;  // non-zero bits in the padding
    return out;
}

// tiktoken.model: one "<base64 token> <rank>" per line (empty lines skipped, as tiktoken's load_tiktoken_bpe does).
// Returns the tokens by rank; the ranks must be exactly 0..n-1, because Kimi's special ids start at n.
Result<std::vector<std::string>> parse_ranks(std::string_view text, const std::string& source) {
    std::vector<std::pair<int64_t, std::string>> entries;
    std::vector<size_t> lines;
    size_t line_no = 0;
    for (size_t pos = 0; pos < text.size();) {
        size_t eol = text.find('\n', pos);
        if (eol == std::string_view::npos) eol = text.size();
        std::string_view line = text.substr(pos, eol - pos);
        pos = eol + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) continue;
        const std::string where = source + ": line " + std::to_string(line_no) + ": ";
        std::vector<std::string_view> fields;
        for (size_t i = 0; i < line.size();) {
            if (line[i] == ' ' || line[i] == '\t') {
                ++i;
                continue;
            }
            size_t j = i;
            while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
            fields.push_back(line.substr(i, j - i));
            i = j;
        }
        if (fields.size() != 2) {
            return invalid_argument(where + "expected '<base64 token> <rank>', got " + std::to_string(fields.size()) +
                                    " field(s)");
        }
        std::optional<std::string> token = base64_decode(fields[0]);
        if (!token) return invalid_argument(where + "token '" + std::string(fields[0]) + "' is not valid base64");
        if (token->empty()) return invalid_argument(where + "empty token");
        int64_t rank = 0;
        bool digits = !fields[1].empty() && fields[1].size() <= 9;
        for (char c : fields[1]) {
            digits = digits && c >= '0' && c <= '9';
            if (digits) rank = rank * 10 + (c - '0');
        }
        if (!digits || rank >= kMaxId - kNumSpecialIds) {
            return invalid_argument(where + "rank '" + std::string(fields[1]) + "' is not an integer in [0, " +
                                    std::to_string(kMaxId - kNumSpecialIds) + ")");
        }
        entries.emplace_back(rank, std::move(*token));
        lines.push_back(line_no);
    }
    if (entries.empty()) return invalid_argument(source + ": no tokens");
    const size_t n = entries.size();
    std::vector<size_t> line_of_rank(n, 0);
    for (size_t i = 0; i < n; ++i) {
        const auto rank = static_cast<size_t>(entries[i].first);
        if (rank < n && line_of_rank[rank] != 0) {
            return invalid_argument(source + ": line " + std::to_string(lines[i]) + ": rank " + std::to_string(rank) +
                                    " is already used on line " + std::to_string(line_of_rank[rank]));
        }
        if (rank < n) line_of_rank[rank] = lines[i];
    }
    for (size_t i = 0; i < n; ++i) {
        if (static_cast<size_t>(entries[i].first) >= n) {
            size_t missing = 0;
            while (line_of_rank[missing] != 0) ++missing;
            return invalid_argument(source + ": ranks are not contiguous: " + std::to_string(n) + " tokens, but rank " +
                                    std::to_string(missing) + " is missing (line " + std::to_string(lines[i]) +
                                    " has rank " + std::to_string(entries[i].first) +
                                    "); the special tokens' ids start at the number of ranks");
        }
    }
    std::vector<std::string> by_rank(n);
    for (auto& [rank, token] : entries) by_rank[static_cast<size_t>(rank)] = std::move(token);
    return by_rank;
}

// A token setting of tokenizer_config.json: a string, {"content": ...} (an AddedToken) or null ("" then).
Status token_name(const json& v, const JsonPath& path, std::string* out) {
    if (v.is_null()) return ok_status();
    if (v.is_string()) {
        *out = v.get<std::string>();
        return ok_status();
    }
    if (v.is_object()) return json_string(v, "content", path, /*required=*/true, out);
    return path.type_error("a string or {\"content\": ...}", v);
}

// What tokenizer_config.json says about the special tokens: names by id (added_tokens_decoder) and which names are
// special for decode(skip_special_tokens) (a token's "special" flag, the bos/eos/unk/pad tokens and
// additional_special_tokens, as transformers' all_special_ids).
struct KimiSpecials {
    std::unordered_map<int32_t, std::pair<std::string, bool>> named;  // id -> (content, special)
    std::unordered_set<std::string> special_names;
};

Status parse_kimi_config(const json& root, const JsonPath& path, KimiSpecials* out) {
    std::string cls;
    PENSTOCK_RETURN_IF_ERROR(json_string(root, "tokenizer_class", path, /*required=*/false, &cls));
    if (!cls.empty() && cls != "TikTokenTokenizer") {
        return unimplemented(path.source + ": field 'tokenizer_class': '" + cls +
                             "' with tiktoken.model is not supported (only Kimi's TikTokenTokenizer)");
    }
    if (root.contains("auto_map") && root["auto_map"].is_object() && root["auto_map"].contains("AutoTokenizer")) {
        const json& a = root["auto_map"]["AutoTokenizer"];
        const json& ref = a.is_array() && !a.empty() ? a[0] : a;
        if (ref.is_string() && !ref.get<std::string>().starts_with("tokenization_kimi.")) {
            return unimplemented(path.source + ": field 'auto_map.AutoTokenizer': '" + ref.get<std::string>() +
                                 "' is not Kimi's tokenization_kimi.TikTokenTokenizer (its pre-tokenizer pattern "
                                 "would be unknown)");
        }
    }
    PENSTOCK_ASSIGN_OR_RETURN(const json* decoder, json_field(root, "added_tokens_decoder", path, false));
    if (decoder != nullptr) {
        const JsonPath dp = path.key("added_tokens_decoder");
        if (!decoder->is_object()) return dp.type_error("an object {id: {\"content\": ...}}", *decoder);
        for (const auto& [key, entry] : decoder->items()) {
            const JsonPath ep = dp.key(key);
            int64_t id = 0;
            bool digits = !key.empty() && key.size() <= 9;
            for (char c : key) {
                digits = digits && c >= '0' && c <= '9';
                if (digits) id = id * 10 + (c - '0');
            }
            if (!digits || id >= kMaxId) return ep.error("the key is not an id in [0, 2^24)");
            std::string content;
            bool special = false;
            PENSTOCK_RETURN_IF_ERROR(json_string(entry, "content", ep, /*required=*/true, &content));
            PENSTOCK_RETURN_IF_ERROR(json_bool(entry, "special", ep, &special));
            if (content.empty()) return ep.key("content").error("empty token");
            out->named[static_cast<int32_t>(id)] = {std::move(content), special};
        }
    }
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
        std::string name;
        if (root.contains(key)) PENSTOCK_RETURN_IF_ERROR(token_name(root[key], path.key(key), &name));
        if (!name.empty()) out->special_names.insert(name);
    }
    PENSTOCK_ASSIGN_OR_RETURN(const json* extra, json_field(root, "additional_special_tokens", path, false));
    if (extra != nullptr) {
        const JsonPath xp = path.key("additional_special_tokens");
        if (!extra->is_array()) return xp.type_error("an array", *extra);
        for (size_t i = 0; i < extra->size(); ++i) {
            std::string name;
            PENSTOCK_RETURN_IF_ERROR(token_name((*extra)[i], xp.index(i), &name));
            if (!name.empty()) out->special_names.insert(name);
        }
    }
    return ok_status();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_tiktoken(std::string_view model_text, std::string_view config_text,
                                                            std::string_view model_source_view,
                                                            std::string_view config_source_view) {
    const std::string model_source(model_source_view), config_source(config_source_view);
    try {
        KimiSpecials specials;
        if (!config_text.empty()) {
            json root;
            try {
                root = json::parse(config_text.begin(), config_text.end());
            } catch (const json::exception& e) {
                return invalid_argument(config_source + ": not valid JSON: " + e.what());
            }
            if (!root.is_object()) return invalid_argument(config_source + ": expected a JSON object at the top level");
            PENSTOCK_RETURN_IF_ERROR(parse_kimi_config(root, JsonPath{config_source, ""}, &specials));
        }
        PENSTOCK_ASSIGN_OR_RETURN(std::vector<std::string> ranks, parse_ranks(model_text, model_source));
        const auto num_base = static_cast<int32_t>(ranks.size());
        std::unique_ptr<Tokenizer> tok(new Tokenizer());
        Impl& impl = *tok->impl_;
        impl.tiktoken = true;
        PENSTOCK_ASSIGN_OR_RETURN(impl.model, BpeModel::from_ranks(std::move(ranks), model_source));
        auto re = Regex::compile_rust(kKimiPattern);
        if (!re.ok()) return re.status().with_context("Kimi's pre-tokenizer pattern");
        impl.pre_tokenizer = PreTokenizer::matches_only(*re);
        impl.decoder = Decoder::raw_bytes();
        // Special tokens: the ids after the ranks, named by added_tokens_decoder or "<|reserved_token_{id}|>" as the
        // reference names them; matched as whole tokens anywhere in the text (allowed_special="all").
        std::vector<AddedToken> added;
        for (int32_t id = num_base; id < num_base + kNumSpecialIds; ++id) {
            AddedToken t;
            t.id = id;
            auto it = specials.named.find(id);
            t.content = it != specials.named.end() ? it->second.first : "<|reserved_token_" + std::to_string(id) + "|>";
            t.special = (it != specials.named.end() && it->second.second) || specials.special_names.contains(t.content);
            if (impl.added_by_content.contains(t.content)) {
                return invalid_argument(config_source + ": special token '" + t.content + "' names ids " +
                                        std::to_string(impl.added_by_content[t.content]) + " and " +
                                        std::to_string(id));
            }
            impl.added_by_content[t.content] = id;
            impl.added_by_id[id] = added.size();
            added.push_back(std::move(t));
        }
        impl.added = AddedVocab(std::move(added), impl.normalizer);
        impl.vocab_size = num_base + kNumSpecialIds;
        if (!config_text.empty()) PENSTOCK_RETURN_IF_ERROR(tok->load_config_json(config_text, config_source));
        // The reference's defaults when the config names no BOS / EOS.
        TokenizerConfig& c = tok->config_;
        if (c.bos_token.empty() && tok->token_to_id("[BOS]").has_value()) {
            c.bos_token = "[BOS]";
            c.bos_id = tok->token_to_id(c.bos_token);
        }
        if (c.eos_token.empty() && tok->token_to_id("[EOS]").has_value()) {
            c.eos_token = "[EOS]";
            c.eos_id = tok->token_to_id(c.eos_token);
        }
        return tok;
    } catch (const std::exception& e) {  // defensive: the accessors above check types before reading
        return internal_error(model_source + ": unexpected error while loading: " + e.what());
    }
}

}  // namespace penstock::engine
