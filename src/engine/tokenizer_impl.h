// Tokenizer::Impl: the parsed parts of tokenizer.json or tiktoken.model, shared by tokenizer.cc (encode/decode),
// tokenizer_load.cc and tiktoken_load.cc (parsing). Internal to src/engine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
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
    // A tiktoken tokenizer (tiktoken_load.cc): model tokens are raw bytes; encode() cuts the text the way Kimi's
    // encode() does before each part goes through the pipeline; no post-processor.
    bool tiktoken = false;

    // Added tokens, normalization, pre-tokenization and BPE of one piece of valid UTF-8 text, appended to *ids.
    [[nodiscard]] Status encode_text(std::string_view text, std::vector<int32_t>* ids) const;
};

// A tokenizer file's contents: NotFound when it cannot be read, InvalidArgument above 1 GiB.
[[nodiscard]] Result<std::string> read_tokenizer_file(const std::filesystem::path& path);

}  // namespace penstock::engine
