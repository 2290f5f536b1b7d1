// BPE model; see bpe.h. merge_all() follows `tokenizers` word.rs: a min-heap of (rank, position) over adjacent
// pairs, stale entries skipped, so a word of n symbols costs O(n log n) (long unsplit inputs stay cheap).
#include "engine/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <utility>

#include "engine/utf8.h"

namespace penstock::engine {

namespace {

using nlohmann::json;

// Parses "merges": legacy ["a b", ...] or pair [["a", "b"], ...].
Status parse_merges(const json& merges, const JsonPath& path, std::vector<std::pair<std::string, std::string>>* out) {
    if (!merges.is_array()) return path.type_error("an array of merges", merges);
    out->reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
        const json& m = merges[i];
        if (m.is_string()) {
            const std::string& s = m.get_ref<const std::string&>();
            const size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
                return path.index(i).error("legacy merge \"" + s + "\" is not two tokens separated by one space");
            }
            out->emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            out->emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        } else {
            return path.index(i).type_error("a merge (\"a b\" or [\"a\", \"b\"])", m);
        }
    }
    return ok_status();
}

}  // namespace

Result<BpeModel> BpeModel::from_json(const json& model, const JsonPath& path) {
    BpeModel bpe;
    std::string type;
    PENSTOCK_RETURN_IF_ERROR(json_string(model, "type", path, /*required=*/false, &type));
    if (!type.empty() && type != "BPE") {
        return unimplemented(path.source + ": field '" + path.key("type").field + "': model type '" + type +
                             "' is not supported (only BPE)");
    }
    PENSTOCK_ASSIGN_OR_RETURN(const json* dropout, json_field(model, "dropout", path, /*required=*/false));
    if (dropout != nullptr && (!dropout->is_number() || dropout->get<double>() != 0.0)) {
        return unimplemented(path.source + ": field '" + path.key("dropout").field +
                             "': BPE dropout is not supported (non-deterministic encoding)");
    }
    PENSTOCK_RETURN_IF_ERROR(
        json_string(model, "continuing_subword_prefix", path, /*required=*/false, &bpe.continuing_subword_prefix_));
    PENSTOCK_RETURN_IF_ERROR(
        json_string(model, "end_of_word_suffix", path, /*required=*/false, &bpe.end_of_word_suffix_));
    PENSTOCK_RETURN_IF_ERROR(json_bool(model, "fuse_unk", path, &bpe.fuse_unk_));
    PENSTOCK_RETURN_IF_ERROR(json_bool(model, "byte_fallback", path, &bpe.byte_fallback_));
    PENSTOCK_RETURN_IF_ERROR(json_bool(model, "ignore_merges", path, &bpe.ignore_merges_));

    PENSTOCK_ASSIGN_OR_RETURN(const json* vocab, json_field(model, "vocab", path, /*required=*/true));
    if (!vocab->is_object()) return path.key("vocab").type_error("an object {token: id}", *vocab);
    bpe.vocab_.reserve(vocab->size());
    for (const auto& [token, id_json] : vocab->items()) {
        int32_t id = 0;
        PENSTOCK_RETURN_IF_ERROR(json_id(id_json, path.key("vocab").key(token), &id));
        bpe.vocab_[token] = id;
        bpe.id_to_token_[id] = token;
        bpe.max_id_ = std::max(bpe.max_id_, id);
    }

    std::string unk;
    PENSTOCK_RETURN_IF_ERROR(json_string(model, "unk_token", path, /*required=*/false, &unk));
    if (!unk.empty()) bpe.unk_id_ = bpe.token_to_id(unk);  // an unk token outside the vocab is never produced

    std::vector<std::pair<std::string, std::string>> merges;
    PENSTOCK_ASSIGN_OR_RETURN(const json* merges_json, json_field(model, "merges", path, /*required=*/false));
    if (merges_json != nullptr) PENSTOCK_RETURN_IF_ERROR(parse_merges(*merges_json, path.key("merges"), &merges));
    const size_t prefix_len = bpe.continuing_subword_prefix_.size();
    bpe.merges_.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
        const auto& [a, b] = merges[i];
        const auto a_id = bpe.token_to_id(a);
        const auto b_id = bpe.token_to_id(b);
        const std::string merged =
            a + (b.size() >= prefix_len && b.compare(0, prefix_len, bpe.continuing_subword_prefix_) == 0
                     ? b.substr(prefix_len)
                     : b);
        const auto new_id = bpe.token_to_id(merged);
        const JsonPath mp = path.key("merges").index(i);
        if (!a_id) return mp.error("merge token '" + a + "' is not in the vocab");
        if (!b_id) return mp.error("merge token '" + b + "' is not in the vocab");
        if (!new_id) return mp.error("merged token '" + merged + "' is not in the vocab");
        bpe.merges_[pair_key(*a_id, *b_id)] = MergeTarget{static_cast<int32_t>(i), *new_id};  // later duplicates win
    }
    return bpe;
}

Result<BpeModel> BpeModel::from_ranks(std::vector<std::string> tokens, std::string_view source) {
    BpeModel bpe;
    bpe.raw_bytes_ = true;
    bpe.ignore_merges_ = true;  // tiktoken: a word that is a token is that token
    bpe.vocab_.reserve(tokens.size());
    bpe.id_to_token_.reserve(tokens.size());
    for (size_t rank = 0; rank < tokens.size(); ++rank) {
        const auto id = static_cast<int32_t>(rank);
        if (tokens[rank].empty())
            return invalid_argument(std::string(source) + ": rank " + std::to_string(rank) + " is an empty token");
        auto [it, inserted] = bpe.vocab_.emplace(tokens[rank], id);
        if (!inserted) {
            return invalid_argument(std::string(source) + ": ranks " + std::to_string(it->second) + " and " +
                                    std::to_string(rank) + " are the same token");
        }
    }
    bpe.byte_ids_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
        if (auto id = bpe.token_to_id(std::string(1, static_cast<char>(b))))
            bpe.byte_ids_[static_cast<size_t>(b)] = *id;
        // 0xC0, 0xC1 and 0xF5..0xFF never occur in UTF-8, so a table may leave them out.
        const bool in_utf8 = b < 0xC0 || (b >= 0xC2 && b <= 0xF4);
        if (in_utf8 && bpe.byte_ids_[static_cast<size_t>(b)] < 0) {
            char hex[8];
            std::snprintf(hex, sizeof(hex), "0x%02X", b);
            return invalid_argument(std::string(source) + ": no token for the single byte " + hex +
                                    " (tiktoken starts every word from single bytes)");
        }
    }
    for (size_t rank = 0; rank < tokens.size(); ++rank) {
        const std::string_view t = tokens[rank];
        for (size_t k = 1; k < t.size(); ++k) {
            const auto a = bpe.token_to_id(t.substr(0, k));
            if (!a) continue;
            const auto b = bpe.token_to_id(t.substr(k));
            if (b) bpe.merges_[pair_key(*a, *b)] = MergeTarget{static_cast<int32_t>(rank), static_cast<int32_t>(rank)};
        }
    }
    for (size_t rank = 0; rank < tokens.size(); ++rank) {
        bpe.id_to_token_.emplace(static_cast<int32_t>(rank), std::move(tokens[rank]));
    }
    bpe.max_id_ = static_cast<int32_t>(tokens.size()) - 1;
    return bpe;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
    auto it = vocab_.find(std::string(token));
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
    auto it = id_to_token_.find(id);
    return it == id_to_token_.end() ? nullptr : &it->second;
}

const BpeModel::MergeTarget* BpeModel::find_merge(int32_t a, int32_t b) const {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>* symbols) const {
    if (raw_bytes_) {  // tiktoken: single bytes (from_ranks checked every byte that UTF-8 text can contain)
        for (unsigned char b : word) {
            if (byte_ids_[b] >= 0) symbols->push_back(byte_ids_[b]);
        }
        return;
    }
    std::optional<int32_t> pending_unk;
    for (size_t pos = 0; pos < word.size();) {
        size_t n = utf8::valid_sequence_length(word, pos);
        if (n == 0) n = 1;  // unreachable for valid input; keeps the loop finite
        std::string s;
        if (pos > 0) s += continuing_subword_prefix_;
        s.append(word.substr(pos, n));
        if (pos + n == word.size()) s += end_of_word_suffix_;
        pos += n;
        if (auto id = token_to_id(s)) {
            if (pending_unk) symbols->push_back(*std::exchange(pending_unk, std::nullopt));
            symbols->push_back(*id);
            continue;
        }
        if (byte_fallback_) {
            std::vector<int32_t> bytes;
            for (unsigned char c : s) {
                char name[8];
                std::snprintf(name, sizeof(name), "<0x%02X>", c);
                auto id = token_to_id(name);
                if (!id) break;
                bytes.push_back(*id);
            }
            if (bytes.size() == s.size()) {
                symbols->insert(symbols->end(), bytes.begin(), bytes.end());
                continue;
            }
        }
        if (!unk_id_) continue;  // `tokenizers` drops the character
        if (pending_unk && !fuse_unk_) symbols->push_back(*pending_unk);
        pending_unk = unk_id_;
    }
    if (pending_unk) symbols->push_back(*pending_unk);
}

void BpeModel::merge_all(std::vector<int32_t>* symbols) const {
    const size_t n = symbols->size();
    if (n < 2) return;
    std::vector<int32_t>& c = *symbols;
    std::vector<int64_t> prev(n), next(n);
    std::vector<bool> alive(n, true);
    for (size_t i = 0; i < n; ++i) {
        prev[i] = static_cast<int64_t>(i) - 1;
        next[i] = i + 1 < n ? static_cast<int64_t>(i + 1) : -1;
    }
    struct Entry {
        int32_t rank;
        size_t pos;
        int32_t new_id;
        bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
    for (size_t i = 0; i + 1 < n; ++i) {
        if (const MergeTarget* m = find_merge(c[i], c[i + 1])) queue.push({m->rank, i, m->new_id});
    }
    while (!queue.empty()) {
        const Entry top = queue.top();
        queue.pop();
        if (!alive[top.pos] || next[top.pos] < 0) continue;
        const auto right = static_cast<size_t>(next[top.pos]);
        const MergeTarget* m = find_merge(c[top.pos], c[right]);
        if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
        c[top.pos] = top.new_id;
        alive[right] = false;
        next[top.pos] = next[right];
        if (next[right] >= 0) prev[static_cast<size_t>(next[right])] = static_cast<int64_t>(top.pos);
        if (prev[top.pos] >= 0) {
            const auto p = static_cast<size_t>(prev[top.pos]);
            if (const MergeTarget* pm = find_merge(c[p], c[top.pos])) queue.push({pm->rank, p, pm->new_id});
        }
        if (next[top.pos] >= 0) {
            const auto q = static_cast<size_t>(next[top.pos]);
            if (const MergeTarget* nm = find_merge(c[top.pos], c[q])) queue.push({nm->rank, top.pos, nm->new_id});
        }
    }
    size_t w = 0;
    for (size_t i = 0; i < n; ++i) {
        if (alive[i]) c[w++] = c[i];
    }
    c.resize(w);
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>* out) const {
    if (word.empty()) return;
    if (ignore_merges_) {
        if (auto id = token_to_id(word)) {
            out->push_back(*id);
            return;
        }
    }
    std::vector<int32_t> symbols;
    initial_symbols(word, &symbols);
    merge_all(&symbols);
    out->insert(out->end(), symbols.begin(), symbols.end());
}

}  // namespace penstock::engine
