// Tokenizer::Impl: the parsed parts of tokenizer.json, shared by tokenizer.cc (encode/decode) and
// tokenizer_load.cc (parsing). Internal to src/engine.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/added_vocab.h"
#include "engine/bpe.h"
#include "engine/decoder.h"
#include "engine/normalizer.h"
#include "engine/pre_tokenizer.h"
#include "engine/tokenizer.h"

namespace penstock::engine {

// One post-processor of the chain (Sequence flattened). Templates list their items; an item is either the input
// sequence or fixed ids. ByteLevel post-processing changes only offsets, so it contributes nothing here.
struct PostProcessStep final {
    struct Item {
        bool is_sequence = false;
        std::vector<int32_t> ids;
    };
    std::vector<Item> single;
};

struct Tokenizer::Impl {
    BpeModel model;
    Normalizer normalizer;
    PreTokenizer pre_tokenizer;
    Decoder decoder;
    AddedVocab added;
    std::vector<PostProcessStep> post;
    std::unordered_map<std::string, int32_t> added_by_content;
    std::unordered_map<int32_t, size_t> added_by_id;  // id -> index into added.tokens()
    int32_t vocab_size = 0;
};

}  // namespace penstock::engine
