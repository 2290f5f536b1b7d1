// Kimi tiktoken tokenizer tests: exact ids and decodes against the `tiktoken` package through Kimi's encode() on
// every case of tests/data/tokenizer/tiktoken_kimi/cases.json (made by tools/gen_tiktoken_cases.py over a synthetic
// rank table), DecodeStream on multi-byte characters byte by byte, special tokens, the regex translation, Kimi's
// long-text cuts, and clear errors for malformed tiktoken.model / tokenizer_config.json files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "engine/regex.h"
#include "engine/tokenizer.h"
#include "engine/utf8.h"

namespace penstock::engine {
namespace {

using nlohmann::json;

const std::string kDir = std::string(PENSTOCK_TEST_DATA_DIR) + "/tokenizer/tiktoken_kimi";

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string quoted(const std::string& s) { return json(s).dump(-1, ' ', true).substr(0, 200); }

const json& cases() {
    static const json j = json::parse(read_text(kDir + "/cases.json"));
    return j;
}

const Tokenizer& kimi() {
    static const std::unique_ptr<Tokenizer> tok = [] {
        auto t = Tokenizer::from_dir(kDir);
        EXPECT_TRUE(t.ok()) << t.status().to_string();
        return t.ok() ? std::move(t).value() : nullptr;
    }();
    PENSTOCK_CHECK(tok != nullptr);
    return *tok;
}

int32_t num_base() { return cases()["num_base"].get<int32_t>(); }

// The reference's name of an id no config names (appended piece by piece: GCC 12's -Wrestrict misfires on chained
// operator+ of std::string temporaries).
std::string reserved_name(int32_t id) {
    std::string s = "<|reserved_token_";
    s += std::to_string(id);
    s += "|>";
    return s;
}

std::string base64(std::string_view bytes) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < bytes.size(); i += 3) {
        uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
        if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
        if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
        out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
    }
    return out;
}

// The 256 single bytes at ranks 0..255, then `extra` tokens.
std::string byte_table(const std::vector<std::string>& extra = {}) {
    std::string out;
    for (int b = 0; b < 256; ++b) out += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
    for (size_t i = 0; i < extra.size(); ++i) out += base64(extra[i]) + " " + std::to_string(256 + i) + "\n";
    return out;
}

// The id of a single-byte token (its GPT-2 alphabet name).
int32_t byte_id(unsigned char b) {
    auto id = kimi().token_to_id(utf8::byte_to_unicode()[b]);
    PENSTOCK_CHECK(id.has_value());
    return *id;
}

TEST(Tiktoken, LoadsKimiDirectory) {
    const Tokenizer& tok = kimi();
    const int32_t base = num_base();
    EXPECT_EQ(tok.vocab_size(), cases()["n_vocab"].get<int32_t>());
    EXPECT_EQ(tok.vocab_size(), base + 258);
    EXPECT_EQ(tok.config().bos_token, "[BOS]");
    EXPECT_EQ(tok.config().bos_id, base);
    EXPECT_EQ(tok.config().eos_id, base + 1);
    EXPECT_EQ(tok.config().pad_id, base + 255);
    EXPECT_NE(tok.config().chat_template.find("<|im_middle|>"), std::string::npos);
    EXPECT_EQ(tok.config().chat_template_source, "tokenizer_config");
    EXPECT_EQ(tok.id_to_token(base + 2), "<|im_end|>");
    EXPECT_EQ(tok.token_to_id("<|im_end|>"), base + 2);
    // Unnamed ids get the reference's reserved names.
    const std::string reserved = reserved_name(base + 5);
    EXPECT_EQ(tok.id_to_token(base + 5), reserved);
    EXPECT_EQ(tok.token_to_id(reserved), base + 5);
    EXPECT_EQ(tok.id_to_token(base + 258), std::nullopt);
    // Special for skip_special_tokens: the "special" flag, bos/eos/unk/pad and additional_special_tokens.
    EXPECT_TRUE(tok.is_special(base));
    EXPECT_TRUE(tok.is_special(base + 2));
    EXPECT_TRUE(tok.is_special(base + 254));
    EXPECT_FALSE(tok.is_special(base + 13)) << "<|tool_call_begin|> is not special in the config";
    EXPECT_FALSE(tok.is_special(base + 5)) << "an unnamed reserved id is no added token of the reference";
    EXPECT_FALSE(tok.is_special(0));
    // Ranked tokens are named in the GPT-2 byte-level alphabet, as Kimi's convert_ids_to_tokens does.
    auto space_a = tok.token_to_id(
        "\xC4\xA0"
        "a");  // "Ġa" = " a"
    ASSERT_TRUE(space_a.has_value());
    EXPECT_EQ(tok.decode(std::vector<int32_t>{*space_a}, false), " a");
    EXPECT_EQ(tok.id_to_token(*space_a),
              "\xC4\xA0"
              "a");
    EXPECT_EQ(tok.token_to_id(" a"), std::nullopt) << "raw bytes are not token names";
}

// Every case: exact ids, decode, and DecodeStream (chunks are valid UTF-8 and join to the text).
TEST(Tiktoken, MatchesTiktokenOnEveryCase) {
    const Tokenizer& tok = kimi();
    int n = 0, n_bad = 0;
    for (const json& c : cases()["cases"]) {
        const std::string text = c["text"].get<std::string>();
        const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
        auto got = tok.encode(text, /*add_special_tokens=*/true);
        ASSERT_TRUE(got.ok()) << got.status().to_string();
        ++n;
        if (*got != want) {
            ++n_bad;
            if (n_bad <= 10) {
                ADD_FAILURE() << "ids differ for " << quoted(text) << "\n  got  " << json(*got).dump().substr(0, 300)
                              << "\n  want " << json(want).dump().substr(0, 300);
            }
            continue;
        }
        EXPECT_EQ(*tok.encode(text, /*add_special_tokens=*/false), want) << quoted(text);
        EXPECT_EQ(tok.decode(want, /*skip_special_tokens=*/false), text) << quoted(text);
        if (want.size() > 2000) continue;  // the long-run cases: streaming is covered by the others
        DecodeStream stream(tok, /*skip_special_tokens=*/false);
        std::string joined;
        for (int32_t id : want) {
            const std::string chunk = stream.step(id);
            EXPECT_FALSE(utf8::first_invalid(chunk).has_value()) << quoted(text);
            joined += chunk;
        }
        joined += stream.flush();
        EXPECT_EQ(joined, text) << quoted(text);
    }
    EXPECT_EQ(n_bad, 0) << n_bad << " of " << n << " cases differ";
    EXPECT_GE(n, 100);
    // The whole-piece tokens (no merge reaches them) were produced by some case.
    std::set<int32_t> used;
    for (const json& c : cases()["cases"]) {
        for (int32_t id : c["ids"].get<std::vector<int32_t>>()) used.insert(id);
    }
    for (const json& id : cases()["whole_piece_tokens"]) EXPECT_TRUE(used.contains(id.get<int32_t>())) << id;
}

// Id lists that cut characters decode as Python's bytes.decode("utf-8", "replace") does.
TEST(Tiktoken, DecodeMatchesPythonReplace) {
    const Tokenizer& tok = kimi();
    for (const json& c : cases()["decode_cases"]) {
        const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
        EXPECT_EQ(tok.decode(ids, false), c["text"].get<std::string>()) << json(ids).dump();
    }
}

TEST(Tiktoken, DecodeStreamHoldsBackIncompleteCharactersByteByByte) {
    const Tokenizer& tok = kimi();
    const std::string text =
        "a\xF0\x9F\x98\x80"
        "b\xE4\xB8\xAD\xC3\xA9";  // a😀b中é
    DecodeStream stream(tok, /*skip_special_tokens=*/false);
    std::vector<std::string> chunks;
    for (unsigned char b : text) chunks.push_back(stream.step(byte_id(b)));
    const std::vector<std::string> want = {"a", "",        "", "", "\xF0\x9F\x98\x80", "b", "", "", "\xE4\xB8\xAD",
                                           "",  "\xC3\xA9"};
    EXPECT_EQ(chunks, want);
    EXPECT_EQ(stream.flush(), "");
    // A character left incomplete at the end comes out as U+FFFD from flush(), as decode() gives it.
    DecodeStream cut(tok, false);
    EXPECT_EQ(cut.step(byte_id('x')), "x");
    EXPECT_EQ(cut.step(byte_id(0xE4)), "");
    EXPECT_EQ(cut.step(byte_id(0xB8)), "");
    EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
    // Special tokens stream whole and are skipped when asked.
    const int32_t im_end = *tok.token_to_id("<|im_end|>");
    DecodeStream skip(tok, /*skip_special_tokens=*/true);
    EXPECT_EQ(skip.step(byte_id(0xE4)), "");
    EXPECT_EQ(skip.step(im_end), "");
    EXPECT_EQ(skip.step(byte_id(0xB8)), "");
    EXPECT_EQ(skip.step(byte_id(0xAD)), "\xE4\xB8\xAD");
}

TEST(Tiktoken, SpecialTokens) {
    const Tokenizer& tok = kimi();
    const int32_t base = num_base();
    auto ids = tok.encode("[BOS]hi<|im_end|><|tool_call_begin|>", /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.ok());
    ASSERT_GE(ids->size(), 4u);
    EXPECT_EQ(ids->front(), base) << "no BOS is added; the text's [BOS] is matched";
    EXPECT_EQ((*ids)[ids->size() - 2], base + 2);
    EXPECT_EQ(ids->back(), base + 13);
    EXPECT_EQ(*tok.encode("hi", true), *tok.encode("hi", false)) << "Kimi's encode adds no special tokens";
    EXPECT_EQ(tok.decode(*ids, /*skip_special_tokens=*/false), "[BOS]hi<|im_end|><|tool_call_begin|>");
    EXPECT_EQ(tok.decode(*ids, /*skip_special_tokens=*/true), "hi<|tool_call_begin|>");
    // Reserved names are matched in text too (tiktoken's allowed_special="all" covers every special token).
    const std::string reserved = reserved_name(base + 200);
    EXPECT_EQ(*tok.encode(reserved, false), std::vector<int32_t>{base + 200});
    // Not a special token: a prefix, or a name outside the 258 ids.
    for (const std::string t : {"<|im_end", "[BOS ]", "<|reserved_token_0|>"}) {
        const std::vector<int32_t> plain = *tok.encode(t, false);
        for (int32_t id : plain) EXPECT_LT(id, base) << t;
    }
    // Unknown ids are skipped by decode.
    EXPECT_EQ(tok.decode(std::vector<int32_t>{base + 258, -1, byte_id('z')}, false), "z");
}

TEST(Tiktoken, TranslatesKimiRegexForPcre2) {
    auto t = Regex::translate_rust(R"([\p{Han}]+|[\p{Lu}\p{M}&&[^\p{Han}]]*x|\p{N}{1,3}|\s+(?!\S))");
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_NE(t->find(R"([\p{sc:Han}]+)"), std::string::npos) << *t;
    EXPECT_NE(t->find(R"((?:(?=[^\p{sc:Han}])[\p{Lu}\p{M}])*x)"), std::string::npos) << *t;
    EXPECT_NE(t->find(R"(\p{N}{1,3})"), std::string::npos) << *t;
    EXPECT_EQ(t->find(R"(\S)"), std::string::npos) << "\\S becomes an explicit White_Space class: " << *t;
    // U+3001 is Common (Script_Extensions include Han): not part of a Han run, as in tiktoken.
    auto re = Regex::compile_rust(R"([\p{Han}]+)");
    ASSERT_TRUE(re.ok()) << re.status().to_string();
    std::vector<std::pair<size_t, size_t>> m;
    ASSERT_TRUE((*re)->find_all("中文、", &m).ok());
    ASSERT_EQ(m.size(), 1u);
    EXPECT_EQ(m[0], std::make_pair(size_t{0}, size_t{6}));
    // The intersection excludes Han and keeps the rest of the class.
    re = Regex::compile_rust(R"([\p{L}&&[^\p{Han}]]+)");
    ASSERT_TRUE(re.ok()) << re.status().to_string();
    ASSERT_TRUE((*re)->find_all("ab中cd", &m).ok());
    ASSERT_EQ(m.size(), 2u);
    EXPECT_EQ(m[1], std::make_pair(size_t{5}, size_t{7}));
    // Set operations outside the translated shape are refused, not misread.
    for (const char* p : {"[a[bc]]", "[^a&&[b]]", "[a&&b]", "[a--b]", "[a&&[b]&&[c]]", "[a[x]&&[b]]"}) {
        auto r = Regex::compile_rust(p);
        EXPECT_FALSE(r.ok()) << p;
        if (!r.ok()) {
            EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented) << p << ": " << r.status().to_string();
        }
    }
    EXPECT_EQ(Regex::compile_rust("[abc").status().code(), StatusCode::kInvalidArgument);
}

// Kimi's encode() encodes 400,000-character chunks separately: ids equal the two halves' ids, and the cut is
// visible (the characters around it encode differently uncut).
TEST(Tiktoken, CutsTextIntoKimiChunks) {
    const Tokenizer& tok = kimi();
    std::string text;
    while (text.size() < 400'010) text += "ser ";
    const std::string head = text.substr(0, 400'000), tail = text.substr(400'000);
    auto all = tok.encode(text, false);
    auto a = tok.encode(head, false);
    auto b = tok.encode(tail, false);
    ASSERT_TRUE(all.ok() && a.ok() && b.ok());
    std::vector<int32_t> joined = *a;
    joined.insert(joined.end(), b->begin(), b->end());
    EXPECT_EQ(*all, joined);
    const std::string around = text.substr(399'990, 20);
    auto uncut = tok.encode(around, false);
    auto left = tok.encode(around.substr(0, 10), false);
    auto right = tok.encode(around.substr(10), false);
    left->insert(left->end(), right->begin(), right->end());
    EXPECT_NE(*uncut, *left) << "the chunk boundary should split a token";
}

// A rank table that is not the canonical shape (tokens ranked before their parts, unreachable tokens) merges by
// rank of the concatenation, exactly as tiktoken.
TEST(Tiktoken, MergesByRankOfConcatenation) {
    // "ab" (256), "abc" (257) reachable as ab+c; "bc" (258); "xyz" (259) unreachable: no "xy"/"yz".
    auto tok = Tokenizer::from_tiktoken(byte_table({"ab", "abc", "bc", "xyz"}), "");
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    EXPECT_EQ(*(*tok)->encode("abc", false), std::vector<int32_t>{257});
    EXPECT_EQ(*(*tok)->encode("abcbc", false), (std::vector<int32_t>{257, 258}));
    EXPECT_EQ(*(*tok)->encode("xyz", false), std::vector<int32_t>{259}) << "a whole piece that is a token";
    EXPECT_EQ(*(*tok)->encode("xyzz", false), (std::vector<int32_t>{'x', 'y', 'z', 'z'}));
    EXPECT_EQ((*tok)->vocab_size(), 260 + 258);
    EXPECT_EQ((*tok)->id_to_token(260), "<|reserved_token_260|>");
    EXPECT_EQ((*tok)->config().bos_id, std::nullopt) << "no config and no [BOS] among the reserved names";
}

// A table of Kimi's size (163,584 ranks, seeded: each token the concatenation of two earlier ones, up to 16 bytes)
// loads and encodes in reasonable time; the timings are printed (docs/design/engine.md quotes them).
TEST(Tiktoken, FullSizeTableLoadsAndEncodes) {
    constexpr size_t kRanks = 163'584;
    std::vector<std::string> tokens;
    std::set<std::string> seen;
    for (int b = 0; b < 256; ++b) {
        tokens.emplace_back(1, static_cast<char>(b));
        seen.insert(tokens.back());
    }
    uint64_t state = 12345;
    auto next = [&](size_t n) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<size_t>((state >> 33) % n);
    };
    size_t tries = 0;
    while (tokens.size() < kRanks && ++tries < 20'000'000) {
        // Half the time a token plus a printable ASCII byte, else two random tokens.
        const std::string& a = tokens[next(tokens.size())];
        const std::string& b = tokens[next(2) == 0 ? 32 + next(95) : next(tokens.size())];
        if (a.size() + b.size() > 16) continue;
        std::string t = a;
        t += b;
        if (seen.insert(t).second) tokens.push_back(std::move(t));
    }
    ASSERT_EQ(tokens.size(), kRanks);
    std::string table;
    for (size_t r = 0; r < tokens.size(); ++r) {
        table += base64(tokens[r]);
        table += ' ';
        table += std::to_string(r);
        table += '\n';
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto tok = Tokenizer::from_tiktoken(table, read_text(kDir + "/tokenizer_config.json"));
    const auto t1 = std::chrono::steady_clock::now();
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    EXPECT_EQ((*tok)->vocab_size(), static_cast<int32_t>(kRanks) + 258);
    std::string text;
    for (const json& c : cases()["cases"]) {
        if (c["text"].get<std::string>().size() < 1000) text += c["text"].get<std::string>();
    }
    while (text.size() < 1'000'000) text += text;
    const auto t2 = std::chrono::steady_clock::now();
    auto ids = (*tok)->encode(text, false);
    const auto t3 = std::chrono::steady_clock::now();
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ((*tok)->decode(*ids, false), text);
    const auto t4 = std::chrono::steady_clock::now();
    auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    std::printf(
        "163,584-rank table: load %.0f ms (%zu bytes); encode %zu bytes -> %zu ids in %.0f ms; decode %.0f ms\n",
        ms(t1 - t0), table.size(), text.size(), ids->size(), ms(t3 - t2), ms(t4 - t3));
    EXPECT_LT(ms(t1 - t0), 20'000.0) << "loading a Kimi-size table should take about a second";
}

void expect_error(const Result<std::unique_ptr<Tokenizer>>& r, StatusCode code, const std::string& needle) {
    ASSERT_FALSE(r.ok()) << "loaded, expected an error containing " << needle;
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
}

TEST(Tiktoken, MalformedModelFilesAreClearErrors) {
    const auto ia = StatusCode::kInvalidArgument;
    expect_error(Tokenizer::from_tiktoken("", ""), ia, "no tokens");
    expect_error(Tokenizer::from_tiktoken(byte_table() + "!!!! 256\n", ""), ia, "line 257: token '!!!!' is not valid");
    expect_error(Tokenizer::from_tiktoken(byte_table() + "YWI 256\n", ""), ia, "not valid base64");
    expect_error(Tokenizer::from_tiktoken(byte_table() + "YWI=\n", ""), ia,
                 "line 257: expected '<base64 token> <rank>'");
    expect_error(Tokenizer::from_tiktoken(byte_table() + "YWI= 256 7\n", ""), ia, "got 3 field(s)");
    expect_error(Tokenizer::from_tiktoken(byte_table() + "YWI= -1\n", ""), ia, "rank '-1'");
    expect_error(Tokenizer::from_tiktoken(byte_table() + "YWI= 12x\n", ""), ia, "rank '12x'");
    expect_error(Tokenizer::from_tiktoken(byte_table() + "YWI= 99999999999\n", ""), ia, "rank '99999999999'");
    expect_error(Tokenizer::from_tiktoken(byte_table() + "YWI= 255\n", ""), ia,
                 "line 257: rank 255 is already used on line 256");
    expect_error(Tokenizer::from_tiktoken(byte_table() + "YWI= 257\n", ""), ia,
                 "ranks are not contiguous: 257 tokens, but rank 256 is missing");
    expect_error(Tokenizer::from_tiktoken(byte_table() + "YQ== 256\n", ""), ia, "ranks 97 and 256 are the same token");
    std::string no_a;
    for (int b = 0, rank = 0; b < 256; ++b) {
        if (b != 'a') no_a += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(rank++) + "\n";
    }
    expect_error(Tokenizer::from_tiktoken(no_a, ""), ia, "no token for the single byte 0x61");
    // Bytes that never occur in UTF-8 may be absent.
    std::string no_ff;
    for (int b = 0; b < 255; ++b)
        no_ff += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
    EXPECT_TRUE(Tokenizer::from_tiktoken(no_ff, "").ok());
    // CRLF line ends and blank lines are accepted.
    std::string crlf;
    for (char c : byte_table({"ab"})) {
        if (c == '\n') crlf.push_back('\r');
        crlf.push_back(c);
    }
    EXPECT_TRUE(Tokenizer::from_tiktoken("\n" + crlf + "\n\n", "").ok());
}

TEST(Tiktoken, MalformedConfigsAreClearErrors) {
    const std::string table = byte_table();
    expect_error(Tokenizer::from_tiktoken(table, "{"), StatusCode::kInvalidArgument,
                 "tokenizer_config.json: not valid JSON");
    expect_error(Tokenizer::from_tiktoken(table, R"({"tokenizer_class": "LlamaTokenizer"})"),
                 StatusCode::kUnimplemented, "'LlamaTokenizer' with tiktoken.model is not supported");
    expect_error(Tokenizer::from_tiktoken(table, R"({"auto_map": {"AutoTokenizer": ["tokenization_other.T", null]}})"),
                 StatusCode::kUnimplemented, "tokenization_other.T");
    expect_error(Tokenizer::from_tiktoken(table, R"({"added_tokens_decoder": {"x1": {"content": "[A]"}}})"),
                 StatusCode::kInvalidArgument, "field 'added_tokens_decoder.x1'");
    expect_error(Tokenizer::from_tiktoken(table, R"({"added_tokens_decoder": {"256": {"content": 7}}})"),
                 StatusCode::kInvalidArgument, "field 'added_tokens_decoder.256.content'");
    expect_error(Tokenizer::from_tiktoken(table, R"({"added_tokens_decoder": {"256": {"content": "[A]"},
                                                     "300": {"content": "[A]"}}})"),
                 StatusCode::kInvalidArgument, "special token '[A]' names ids 256 and 300");
    // Named ids outside the special range are ignored, as by the reference's tiktoken encoding.
    auto ok = Tokenizer::from_tiktoken(table, R"({"added_tokens_decoder": {"9999": {"content": "[Z]"}}})");
    ASSERT_TRUE(ok.ok()) << ok.status().to_string();
    EXPECT_EQ((*ok)->token_to_id("[Z]"), std::nullopt);
}

// Seeded mutations of a valid tiktoken.model and tokenizer_config.json: every load returns a tokenizer or an error
// (no crash, no exception), and a loaded tokenizer encodes and decodes.
TEST(Tiktoken, MutatedFilesNeverCrash) {
    const std::string table = byte_table({"ab", "abc", " a", "\xE4\xB8\xAD"});
    const std::string config = read_text(kDir + "/tokenizer_config.json");
    uint64_t state = 777;
    auto next = [&](size_t n) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<size_t>((state >> 33) % n);
    };
    const std::string alphabet = " \n\r\t=+/09AZaz-{}[]\":,\\";
    auto mutate = [&](std::string s) {
        for (size_t k = 1 + next(4); k > 0 && !s.empty(); --k) {
            const size_t pos = next(s.size());
            switch (next(4)) {
                case 0:
                    s[pos] = alphabet[next(alphabet.size())];
                    break;
                case 1:
                    s.erase(pos, 1 + next(8));
                    break;
                case 2:
                    s.insert(pos, 1, alphabet[next(alphabet.size())]);
                    break;
                case 3:
                    s.insert(pos, s.substr(next(s.size()), next(16)));
                    break;
            }
        }
        return s;
    };
    int n_ok = 0;
    for (int i = 0; i < 1500; ++i) {
        const bool model_side = i % 2 == 0;
        auto tok = Tokenizer::from_tiktoken(model_side ? mutate(table) : table, model_side ? config : mutate(config));
        if (!tok.ok()) {
            EXPECT_FALSE(tok.status().message().empty());
            continue;
        }
        ++n_ok;
        auto ids = (*tok)->encode("abc 中文 [BOS]<|im_end|> x", false);
        ASSERT_TRUE(ids.ok()) << ids.status().to_string();
        (void)(*tok)->decode(*ids, true);
    }
    EXPECT_GT(n_ok, 0);
}

class TempDir {
public:
    TempDir() : path_(std::filesystem::temp_directory_path() / ("tiktoken_test_" + std::to_string(getpid()))) {
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() { std::filesystem::remove_all(path_); }
    const std::filesystem::path& path() const { return path_; }
    void write(const std::string& name, const std::string& text) const {
        std::ofstream(path_ / name, std::ios::binary) << text;
    }

private:
    std::filesystem::path path_;
};

TEST(Tiktoken, DirectoryErrors) {
    TempDir dir;
    auto none = Tokenizer::from_dir(dir.path());
    expect_error(none, StatusCode::kNotFound, "neither tokenizer.json nor tiktoken.model");
    dir.write("tiktoken.model", "YWI= 0\n");
    expect_error(Tokenizer::from_dir(dir.path()), StatusCode::kInvalidArgument,
                 "tiktoken.model: no token for the single byte");
    dir.write("tiktoken.model", byte_table());
    dir.write("tokenizer_config.json", R"({"bos_token": 5})");
    expect_error(Tokenizer::from_dir(dir.path()), StatusCode::kInvalidArgument,
                 "tokenizer_config.json: field 'bos_token'");
    // A good directory; chat_template.jinja wins over the config's template, as for tokenizer.json directories.
    dir.write("tokenizer_config.json", R"({"chat_template": "from config"})");
    dir.write("chat_template.jinja", "from jinja");
    auto tok = Tokenizer::from_dir(dir.path());
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    EXPECT_EQ((*tok)->config().chat_template, "from jinja");
    EXPECT_EQ((*tok)->config().chat_template_source, "chat_template.jinja");
}

}  // namespace
}  // namespace penstock::engine
