// AddedVocab: tokenizer.json's "added_tokens", matched in the raw text before pre-tokenization the way `tokenizers`
// does (added_vocabulary.rs): leftmost-longest over all contents, first the tokens with normalized=false on the raw
// text, then, in the remaining pieces after normalization, the normalized=true ones (matched by their normalized
// content); single_word, lstrip and rstrip as documented there.
// Immutable after construction; split() is const.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/normalizer.h"

namespace penstock::engine {

struct AddedToken final {
    int32_t id = 0;
    std::string content;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
    bool special = false;
    // What decode() and id_to_token() give: the normalized content for normalized tokens (`tokenizers`
    // simple_id_to_token), else the content. Set by AddedVocab.
    std::string decoded;
};

// A byte range of the input; `id` >= 0 when the range is an added token, -1 when it still needs the model.
struct Piece final {
    size_t begin = 0;
    size_t end = 0;
    int32_t id = -1;
};

class AddedVocab final {
public:
    AddedVocab() = default;
    AddedVocab(std::vector<AddedToken> tokens, const Normalizer& normalizer);

    // One matching pass: splits `text` (valid UTF-8) into pieces covering it, in order, none empty, matching the
    // tokens with normalized == `normalized` (pass false on the raw text, then true on each normalized piece).
    std::vector<Piece> split(std::string_view text, bool normalized) const;

    const std::vector<AddedToken>& tokens() const { return tokens_; }

private:
    // Byte trie over the contents of one class of tokens (normalized or not).
    struct Trie {
        struct Node {
            std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
            int32_t token = -1;                                       // index into tokens_
        };
        std::vector<Node> nodes{1};
        void insert(std::string_view s, int32_t token);
        // Longest token starting at text[pos]: its index, or -1; *len receives its byte length.
        int32_t longest_at(std::string_view text, size_t pos, size_t* len) const;
    };

    std::vector<AddedToken> tokens_;
    Trie raw_;         // normalized == false
    Trie normalized_;  // normalized == true
};

}  // namespace penstock::engine
