// BpeModel: the "BPE" model of a Hugging Face tokenizer.json (vocab + ranked merges), or tiktoken's mergeable ranks,
// applied to one pre-tokenized word. Reproduces `tokenizers` (models/bpe): ignore_merges, continuing_subword_prefix,
// end_of_word_suffix, byte_fallback (<0xXX> tokens), unk_token with fuse_unk; characters with no token and no
// fallback are dropped. For tiktoken ranks it reproduces tiktoken's byte pair merge (from_ranks).
// Immutable after construction; tokenize() is const and safe to call concurrently.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/json_util.h"

namespace penstock::engine {

class BpeModel final {
public:
    // `model` is tokenizer.json's "model" object (type "BPE"); `path` names it.
    [[nodiscard]] static Result<BpeModel> from_json(const nlohmann::json& model, const JsonPath& path);
    // tiktoken's mergeable ranks: tokens[rank] is the token's raw bytes, and the id is the rank. tiktoken encodes a
    // word (raw bytes, no byte-to-unicode mapping) as the single token equal to it when there is one, else starts
    // from single bytes and merges the adjacent pair whose concatenation has the lowest rank (the leftmost among
    // equal ones) until no concatenation is a token. That is merge_all() with the merge (a, b) -> a + b ranked
    // rank(a + b) for every split of a token into two tokens a, b. InvalidArgument (naming `source`) for a
    // duplicate or empty token, or a byte that can occur in UTF-8 text without a single-byte token.
    [[nodiscard]] static Result<BpeModel> from_ranks(std::vector<std::string> tokens, std::string_view source);

    // Appends the ids of one word (already byte-level mapped when the pre-tokenizer is ByteLevel).
    void tokenize(std::string_view word, std::vector<int32_t>* out) const;

    std::optional<int32_t> token_to_id(std::string_view token) const;
    const std::string* id_to_token(int32_t id) const;  // nullptr when the id is not in the vocab
    int32_t max_id() const { return max_id_; }         // -1 for an empty vocab

private:
    struct MergeTarget {
        int32_t rank;
        int32_t new_id;
    };
    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    const MergeTarget* find_merge(int32_t a, int32_t b) const;
    void initial_symbols(std::string_view word, std::vector<int32_t>* symbols) const;
    void merge_all(std::vector<int32_t>* symbols) const;

    std::unordered_map<std::string, int32_t> vocab_;
    std::unordered_map<int32_t, std::string> id_to_token_;  // a map: ids may be sparse (up to 2^24)
    int32_t max_id_ = -1;
    std::unordered_map<uint64_t, MergeTarget> merges_;
    std::optional<int32_t> unk_id_;
    std::string continuing_subword_prefix_;
    std::string end_of_word_suffix_;
    bool fuse_unk_ = false;
    bool byte_fallback_ = false;
    bool ignore_merges_ = false;
    bool raw_bytes_ = false;         // from_ranks: words start as single bytes
    std::vector<int32_t> byte_ids_;  // raw_bytes_: [256] the id of each single byte, -1 when none
};

}  // namespace penstock::engine
