// Tokenizer: a Hugging Face tokenizer.json byte-level BPE tokenizer (DeepSeek-V3, Llama-3, Qwen-2 with NFC, GPT-2),
// producing the same ids as the `tokenizers` package, or a Kimi tiktoken tokenizer (tiktoken.model, producing the
// same ids as Moonshot's tokenization_kimi.py over `tiktoken`); plus tokenizer_config.json's special tokens and
// chat template, and DecodeStream for streaming detokenization. The contract (supported features, errors, the
// invalid-UTF-8 policy) is docs/design/engine.md. A Tokenizer is immutable after loading: every method is const and
// may be called from several threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace penstock::engine {

// What tokenizer_config.json adds (all optional).
struct TokenizerConfig final {
    std::optional<int32_t> bos_id;  // bos_token's id, when the token is set and known to the tokenizer
    std::optional<int32_t> eos_id;
    std::optional<int32_t> pad_id;
    std::string bos_token, eos_token, pad_token;
    std::string chat_template;  // Jinja source, unrendered ("" when absent); the "default" one of a named list
    // Where chat_template came from: "tokenizer_config" or "chat_template.jinja" (which wins when both exist).
    std::string chat_template_source = "tokenizer_config";
};

class Tokenizer final {
public:
    // Parses tokenizer.json text; `source` names it in error messages. InvalidArgument for malformed JSON or fields
    // (the message names the file and the field), Unimplemented for features outside the supported set.
    [[nodiscard]] static Result<std::unique_ptr<Tokenizer>> from_json(std::string_view text,
                                                                      std::string_view source = "tokenizer.json");
    [[nodiscard]] static Result<std::unique_ptr<Tokenizer>> from_file(const std::filesystem::path& path);
    // Kimi's tiktoken tokenizer (Kimi K2, Kimi Linear, Kimi K3): `model_text` is tiktoken.model ("<base64 bytes>
    // <rank>" lines, ranks 0..n-1), `config_text` tokenizer_config.json ("" when absent: the 258 special tokens
    // after the ranks keep their reserved names). InvalidArgument for malformed lines or fields (the message names
    // the file and the line or field), Unimplemented for a tokenizer_class other than Kimi's TikTokenTokenizer.
    [[nodiscard]] static Result<std::unique_ptr<Tokenizer>> from_tiktoken(
        std::string_view model_text, std::string_view config_text, std::string_view model_source = "tiktoken.model",
        std::string_view config_source = "tokenizer_config.json");
    // A checkpoint directory: DIR/tokenizer.json (plus DIR/tokenizer_config.json when present), else
    // DIR/tiktoken.model (plus tokenizer_config.json) as from_tiktoken; with either, chat_template.jinja next to
    // tokenizer_config.json. NotFound when the directory has neither tokenizer.json nor tiktoken.model.
    [[nodiscard]] static Result<std::unique_ptr<Tokenizer>> from_dir(const std::filesystem::path& dir);

    // Reads tokenizer_config.json (bos/eos/pad tokens, chat_template) into config().
    [[nodiscard]] Status load_config_json(std::string_view text, std::string_view source = "tokenizer_config.json");
    [[nodiscard]] Status load_config_file(const std::filesystem::path& path);

    // Token ids of `text`. add_special_tokens applies the post-processor (e.g. prepends BOS; a tiktoken tokenizer
    // has none, as Kimi's encode adds nothing). InvalidArgument when
    // `text` is not valid UTF-8 (the error gives the byte offset); the `tokenizers` package only ever sees valid
    // Unicode, so no replacement policy could match it.
    [[nodiscard]] Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const;

    // Text of `ids` (valid UTF-8; incomplete or invalid byte sequences become U+FFFD). Unknown ids are skipped, as
    // `tokenizers` does; skip_special_tokens drops added tokens marked special.
    std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

    // Token strings are those of tokenizer.json's vocab and added tokens; for a tiktoken tokenizer, a ranked
    // token's bytes in the GPT-2 byte-level alphabet (what Kimi's convert_ids_to_tokens gives) and special tokens
    // by name.
    std::optional<int32_t> token_to_id(std::string_view token) const;
    std::optional<std::string> id_to_token(int32_t id) const;
    bool is_special(int32_t id) const;
    // One past the largest id of the model vocab and the added tokens.
    int32_t vocab_size() const;
    const TokenizerConfig& config() const { return config_; }

    ~Tokenizer();
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

private:
    struct Impl;
    Tokenizer();
    // chat_template.jinja in `dir` (transformers 5 layout) replaces config().chat_template when present.
    [[nodiscard]] Status load_chat_template_jinja(const std::filesystem::path& dir);
    std::unique_ptr<Impl> impl_;
    TokenizerConfig config_;
};

// Incremental detokenization for streaming (the `tokenizers` DecodeStream algorithm): feed ids one at a time; each
// step returns the newly completed text, "" while a character is still incomplete. Returned pieces never split a
// UTF-8 code point, and their concatenation plus flush() equals decode(all ids). Holds a reference to the
// tokenizer, which must outlive it. One stream per request; not thread-safe.
class DecodeStream final {
public:
    DecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens);

    std::string step(int32_t id);
    // Text still held back at the end of the stream (an incomplete character decodes to U+FFFD here).
    std::string flush();

private:
    const Tokenizer& tokenizer_;
    bool skip_special_tokens_;
    std::vector<int32_t> ids_;
    std::string prefix_;
    size_t prefix_index_ = 0;
};

}  // namespace penstock::engine
