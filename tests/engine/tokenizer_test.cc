// Tokenizer tests: exact ids, decode and DecodeStream output against the `tokenizers` package on every corpus line
// of tests/data/tokenizer/*.jsonl, added/special token behaviour, the invalid-UTF-8 policy, and clear errors for
// malformed tokenizer.json files.
#include "engine/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/regex.h"
#include "engine/utf8.h"

namespace penstock::engine {
namespace {

using nlohmann::json;

const std::string kDataDir = std::string(PENSTOCK_TEST_DATA_DIR) + "/tokenizer";
const std::string kAssetDir = std::string(PENSTOCK_ASSETS_DIR) + "/tiny-deepseek-v3";

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::unique_ptr<Tokenizer> load(const std::string& path) {
    auto tok = Tokenizer::from_file(path);
    EXPECT_TRUE(tok.ok()) << tok.status().to_string();
    return tok.ok() ? std::move(tok).value() : nullptr;
}

std::string quoted(const std::string& s) { return json(s).dump(-1, ' ', true); }

struct FixtureCase {
    std::string name;
    std::string tokenizer_path;
};

class TokenizerFixtureTest : public ::testing::TestWithParam<FixtureCase> {};

// Every corpus line: ids with and without special tokens, both decodes, and the DecodeStream chunks.
TEST_P(TokenizerFixtureTest, MatchesHuggingFaceTokenizers) {
    const FixtureCase& fc = GetParam();
    auto tok = load(fc.tokenizer_path);
    ASSERT_NE(tok, nullptr);
    std::ifstream in(kDataDir + "/" + fc.name + ".jsonl");
    ASSERT_TRUE(in) << "missing fixture " << fc.name << ".jsonl (run tools/make_tokenizer_fixtures.py)";
    std::string line;
    std::getline(in, line);  // header: tokenizers version
    int n_lines = 0, n_bad = 0;
    while (std::getline(in, line)) {
        const json row = json::parse(line);
        const std::string text = row["text"].get<std::string>();
        const std::string want_decoded = row["decoded"].get<std::string>();
        ++n_lines;
        const auto ids = tok->encode(text, /*add_special_tokens=*/true);
        const auto ids_plain = tok->encode(text, /*add_special_tokens=*/false);
        ASSERT_TRUE(ids.ok() && ids_plain.ok()) << ids.status().to_string();
        const auto want = row["ids"].get<std::vector<int32_t>>();
        const auto want_plain = row["ids_no_special"].get<std::vector<int32_t>>();
        const std::string decoded = tok->decode(want, /*skip_special_tokens=*/false);
        const std::string decoded_skip = tok->decode(want, /*skip_special_tokens=*/true);
        const std::string want_skip = row.value("decoded_skip_special", want_decoded);
        DecodeStream stream(*tok, /*skip_special_tokens=*/false);
        std::vector<std::string> chunks;
        std::string streamed;
        bool chunks_valid = true;
        for (int32_t id : want) {
            std::string c = stream.step(id);
            chunks_valid = chunks_valid && !utf8::first_invalid(c).has_value();
            streamed += c;
            if (!c.empty()) chunks.push_back(std::move(c));
        }
        streamed += stream.flush();
        const bool ok = *ids == want && *ids_plain == want_plain && decoded == want_decoded &&
                        decoded_skip == want_skip && chunks == row["stream"].get<std::vector<std::string>>() &&
                        streamed == decoded && chunks_valid;
        if (!ok && ++n_bad <= 5) {
            ADD_FAILURE() << fc.name << " line " << n_lines << " text " << quoted(text) << "\n  ids  " << json(*ids)
                          << "\n  want " << row["ids"] << "\n  plain " << json(*ids_plain) << "\n  want  "
                          << row["ids_no_special"] << "\n  decoded " << quoted(decoded) << " want "
                          << quoted(want_decoded) << "\n  skip " << quoted(decoded_skip) << " want "
                          << quoted(want_skip) << "\n  stream " << json(chunks) << " want " << row["stream"]
                          << " streamed " << quoted(streamed);
        }
    }
    EXPECT_EQ(n_bad, 0) << n_bad << " of " << n_lines << " lines differ";
    EXPECT_GT(n_lines, 200);
    std::printf("[ tokenizer ] %s: %d corpus lines, %d mismatches\n", fc.name.c_str(), n_lines, n_bad);
}

INSTANTIATE_TEST_SUITE_P(Corpus, TokenizerFixtureTest,
                         ::testing::Values(FixtureCase{"tiny_deepseek_v3", kAssetDir + "/tokenizer.json"},
                                           FixtureCase{"gpt2_style", kDataDir + "/gpt2_style.tokenizer.json"},
                                           FixtureCase{"llama3_style", kDataDir + "/llama3_style.tokenizer.json"},
                                           FixtureCase{"o200k_mixed", kDataDir + "/o200k_mixed.tokenizer.json"},
                                           FixtureCase{"qwen2_nfc", kDataDir + "/qwen2_nfc.tokenizer.json"}),
                         [](const auto& info) { return info.param.name; });

TEST(Tokenizer, BundledModelDirHasConfigAndMatchingVocab) {
    auto tok = Tokenizer::from_dir(kAssetDir);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const TokenizerConfig& c = (*tok)->config();
    EXPECT_EQ(c.bos_token, "<｜begin▁of▁sentence｜>");
    EXPECT_EQ(c.bos_id, 0);
    EXPECT_EQ(c.eos_id, 1);
    EXPECT_EQ(c.pad_id, 511);
    EXPECT_NE(c.chat_template.find("<｜User｜>"), std::string::npos);
    const json model_config = json::parse(read_text(kAssetDir + "/config.json"));
    EXPECT_EQ((*tok)->vocab_size(), model_config["vocab_size"].get<int32_t>());
}

TEST(Tokenizer, AddedAndSpecialTokens) {
    auto tok = load(kAssetDir + "/tokenizer.json");
    ASSERT_NE(tok, nullptr);
    const int32_t bos = *tok->token_to_id("<｜begin▁of▁sentence｜>");
    const int32_t think = *tok->token_to_id("<think>");
    const int32_t acme = *tok->token_to_id("ACME");
    EXPECT_EQ(bos, 0);
    EXPECT_TRUE(tok->is_special(bos));
    EXPECT_FALSE(tok->is_special(think));
    EXPECT_EQ(tok->id_to_token(think), "<think>");
    EXPECT_EQ(tok->id_to_token(100000), std::nullopt);
    // Special token in the middle of text: one id; add_special_tokens prepends BOS.
    auto ids = tok->encode("a<｜begin▁of▁sentence｜>b", true);
    ASSERT_TRUE(ids.ok());
    ASSERT_EQ(ids->size(), 4u);
    EXPECT_EQ((*ids)[0], bos);
    EXPECT_EQ((*ids)[2], bos);
    // lstrip / rstrip: the spaces around <think> belong to the token.
    auto a = tok->encode("x   <think>   y", false);
    auto b = tok->encode("x<think>y", false);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b);
    // single_word: ACME inside a word is not the added token.
    auto word = tok->encode("ACME", false);
    auto inside = tok->encode("xACMEx", false);
    ASSERT_TRUE(word.ok() && inside.ok());
    EXPECT_EQ(*word, std::vector<int32_t>{acme});
    EXPECT_EQ(std::count(inside->begin(), inside->end(), acme), 0);
    // skip_special_tokens drops special added tokens only.
    const std::vector<int32_t> mixed = {bos, think, bos};
    EXPECT_EQ(tok->decode(mixed, true), "<think>");
    EXPECT_EQ(tok->decode(mixed, false), "<｜begin▁of▁sentence｜><think><｜begin▁of▁sentence｜>");
}

TEST(Tokenizer, InvalidUtf8IsAnError) {
    auto tok = load(kAssetDir + "/tokenizer.json");
    ASSERT_NE(tok, nullptr);
    for (const std::string& bad :
         {std::string("ab\xff"), std::string("\xe4\xb8"), std::string("\xed\xa0\x80"), std::string("\xc0\xaf")}) {
        auto r = tok->encode(bad, true);
        ASSERT_FALSE(r.ok()) << quoted(bad);
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
        EXPECT_NE(r.status().message().find("UTF-8"), std::string::npos);
    }
    auto empty = tok->encode("", true);
    ASSERT_TRUE(empty.ok());
    EXPECT_EQ(*empty, std::vector<int32_t>{0});  // just BOS
}

TEST(Tokenizer, DecodeStreamNeverSplitsACodePoint) {
    auto tok = load(kDataDir + "/gpt2_style.tokenizer.json");
    ASSERT_NE(tok, nullptr);
    // One byte-level token per byte of a 4-byte emoji: nothing is emitted until the character is complete.
    std::vector<int32_t> ids;
    for (unsigned char b : std::string("😀")) ids.push_back(*tok->token_to_id(utf8::byte_to_unicode()[b]));
    DecodeStream stream(*tok, false);
    EXPECT_EQ(stream.step(ids[0]), "");
    EXPECT_EQ(stream.step(ids[1]), "");
    EXPECT_EQ(stream.step(ids[2]), "");
    EXPECT_EQ(stream.step(ids[3]), "😀");
    // An unfinished character at the end comes out of flush() as U+FFFD, like decode().
    EXPECT_EQ(stream.step(ids[0]), "");
    EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
    EXPECT_EQ(tok->decode(std::vector<int32_t>{ids[0]}, false), "\xEF\xBF\xBD");
}

// A hand-written tokenizer: byte_fallback, unk, Llama-2 style decoder chain (Replace, ByteFallback, Fuse, Strip).
TEST(Tokenizer, ByteFallbackUnkAndDecoderChain) {
    const std::string text = R"({
      "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", "fuse_unk": true,
                "vocab": {"<unk>": 0, "<0xE4>": 1, "<0xB8>": 2, "<0xAD>": 3, "▁": 4, "a": 5, "b": 6, "▁a": 7, "ab": 8},
                "merges": [["▁", "a"], ["a", "b"]]},
      "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": false},
      "decoder": {"type": "Sequence", "decoders": [
          {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
          {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}})";
    auto tok = Tokenizer::from_json(text);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    auto ids = (*tok)->encode("ab中xy", false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, (std::vector<int32_t>{8, 1, 2, 3, 0}));  // "ab", 3 fallback bytes, fused unk for "xy"
    EXPECT_EQ((*tok)->decode(std::vector<int32_t>{7, 1, 2, 3}, false), "a中");
    EXPECT_EQ((*tok)->decode(std::vector<int32_t>{4, 1, 2}, false), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Tokenizer, RegexTranslatesOnigurumaSpellings) {
    // \uHHHH escapes, and \s as Unicode White_Space (PCRE2's own \s would also match U+180E).
    auto cjk = Regex::compile(R"([\u3040-\u309F]+)");
    ASSERT_TRUE(cjk.ok()) << cjk.status().to_string();
    std::vector<std::pair<size_t, size_t>> m;
    ASSERT_TRUE((*cjk)->find_all("aぁぃb", &m).ok());
    EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{1, 7}}));
    auto ws = Regex::compile(R"(\\s|\s+|[^\s\p{L}]+)");
    ASSERT_TRUE(ws.ok()) << ws.status().to_string();
    ASSERT_TRUE((*ws)->find_all("\u180e\u3000\t\\s", &m).ok());  // U+180E is not space; "\\s" is a literal "\s"
    EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{0, 3}, {3, 7}, {7, 9}}));
    auto lit = Regex::literal("a.b[");
    ASSERT_TRUE(lit.ok());
    ASSERT_TRUE((*lit)->find_all("axb a.b[", &m).ok());
    EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{4, 8}}));
}

// Long unsplit runs: BPE merging is O(n log n) and the regexes do not backtrack quadratically, so these finish in
// well under a second (a quadratic path would take minutes and hit the test timeout).
TEST(Tokenizer, LongRunsStayFast) {
    auto tok = load(kDataDir + "/gpt2_style.tokenizer.json");
    ASSERT_NE(tok, nullptr);
    for (const std::string& text : {std::string(200000, 'a'), std::string(200000, ' ') + "x", std::string(100000, '9'),
                                    std::string(50000, '!')}) {
        auto ids = tok->encode(text, false);
        ASSERT_TRUE(ids.ok()) << ids.status().to_string();
        const std::string want = text.front() == ' ' ? text : " " + text;  // add_prefix_space
        EXPECT_TRUE(tok->decode(*ids, false) == want) << "round trip of a run of " << text.size() << " bytes";
    }
}

Status load_error(const std::string& text) {
    auto tok = Tokenizer::from_json(text, "bad/tokenizer.json");
    return tok.ok() ? ok_status() : tok.status();
}

void expect_error(const std::string& text, StatusCode code, const std::string& needle) {
    const Status s = load_error(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find("bad/tokenizer.json"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string() << "\n  expected to mention: " << needle;
}

TEST(Tokenizer, MalformedFilesGiveClearErrors) {
    const std::string good = read_text(kAssetDir + "/tokenizer.json");
    ASSERT_TRUE(load_error(good).ok());
    expect_error(good.substr(0, good.size() / 2), StatusCode::kInvalidArgument, "not valid JSON");
    expect_error("", StatusCode::kInvalidArgument, "not valid JSON");
    expect_error("[1, 2]", StatusCode::kInvalidArgument, "top level");
    expect_error("{}", StatusCode::kInvalidArgument, "field 'model': missing");
    expect_error(R"({"model": 3})", StatusCode::kInvalidArgument, "field 'model'");
    expect_error(R"({"model": {"type": "BPE"}})", StatusCode::kInvalidArgument, "field 'model.vocab': missing");
    expect_error(R"({"model": {"vocab": []}})", StatusCode::kInvalidArgument, "field 'model.vocab'");
    expect_error(R"({"model": {"vocab": {"a": "x"}}})", StatusCode::kInvalidArgument, "field 'model.vocab.a'");
    expect_error(R"({"model": {"vocab": {"a": -1}}})", StatusCode::kInvalidArgument, "out of range");
    expect_error(R"({"model": {"vocab": {"a": 0}, "merges": [7]}})", StatusCode::kInvalidArgument,
                 "field 'model.merges[0]'");
    expect_error(R"({"model": {"vocab": {"a": 0}, "merges": ["a b"]}})", StatusCode::kInvalidArgument,
                 "merge token 'b' is not in the vocab");
    expect_error(R"({"model": {"vocab": {"a": 0}, "merges": ["a a a"]}})", StatusCode::kInvalidArgument,
                 "model.merges[0]");
    expect_error(R"({"model": {"type": "WordPiece", "vocab": {}}})", StatusCode::kUnimplemented, "WordPiece");
    expect_error(R"({"model": {"vocab": {}}, "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"},
                 {"type": "Lowercase"}]}})",
                 StatusCode::kUnimplemented, "field 'normalizer.normalizers[1].type': normalizer 'Lowercase'");
    expect_error(R"({"model": {"vocab": {}}, "pre_tokenizer": {"type": "Metaspace"}})", StatusCode::kUnimplemented,
                 "Metaspace");
    expect_error(R"({"model": {"vocab": {}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("},
                 "behavior": "Isolated"}})",
                 StatusCode::kInvalidArgument, "pre_tokenizer.pattern");
    expect_error(R"({"model": {"vocab": {}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"},
                 "behavior": "Sideways"}})",
                 StatusCode::kInvalidArgument, "Sideways");
    expect_error(R"({"model": {"vocab": {}}, "added_tokens": [{"id": 1}]})", StatusCode::kInvalidArgument,
                 "field 'added_tokens[0].content': missing");
    expect_error(R"({"model": {"vocab": {}}, "added_tokens": [{"id": 1, "content": "x", "special": "yes"}]})",
                 StatusCode::kInvalidArgument, "added_tokens[0].special");
    expect_error(R"({"model": {"vocab": {}}, "post_processor": {"type": "TemplateProcessing",
                 "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}], "special_tokens": {}}})",
                 StatusCode::kInvalidArgument, "'<s>' is not defined");
    expect_error(R"({"model": {"vocab": {}}, "decoder": {"type": "CTC"}})", StatusCode::kUnimplemented, "CTC");
    const auto missing = Tokenizer::from_file("/nonexistent/tokenizer.json");
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(Tokenizer, MalformedConfigGivesClearErrors) {
    auto tok = load(kAssetDir + "/tokenizer.json");
    ASSERT_NE(tok, nullptr);
    const Status s = tok->load_config_json(R"({"bos_token": 5})", "cfg/tokenizer_config.json");
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("cfg/tokenizer_config.json: field 'bos_token'"), std::string::npos) << s.to_string();
    EXPECT_FALSE(tok->load_config_json("{", "cfg").ok());
    ASSERT_TRUE(tok->load_config_json(
                       R"({"eos_token": "<｜end▁of▁sentence｜>", "chat_template": [{"name": "tool", "template": "T"},
                          {"name": "default", "template": "D"}]})")
                    .ok());
    EXPECT_EQ(tok->config().eos_id, 1);
    EXPECT_EQ(tok->config().chat_template, "D");
}

// transformers 5 writes the template to chat_template.jinja next to tokenizer_config.json; that file wins.
TEST(Tokenizer, ChatTemplateJinjaFileWinsOverConfigField) {
    auto tok = load(kAssetDir + "/tokenizer.json");
    ASSERT_NE(tok, nullptr);
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("penstock_tok_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "FROM CONFIG"})";
    ASSERT_TRUE(tok->load_config_file(dir / "tokenizer_config.json").ok());
    EXPECT_EQ(tok->config().chat_template, "FROM CONFIG");
    EXPECT_EQ(tok->config().chat_template_source, "tokenizer_config");
    std::ofstream(dir / "chat_template.jinja") << "{{ bos_token }}FROM FILE\n";
    ASSERT_TRUE(tok->load_config_file(dir / "tokenizer_config.json").ok());
    EXPECT_EQ(tok->config().chat_template, "{{ bos_token }}FROM FILE\n");
    EXPECT_EQ(tok->config().chat_template_source, "chat_template.jinja");
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace penstock::engine
