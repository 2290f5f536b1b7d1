// Fuzz smoke for the tokenizer.json parser (deterministic; seed printed on failure): seeded structural mutations
// (a random node replaced by a value of another type) and byte-level mutations (flips, truncations, splices) of the
// bundled tokenizer.json. Every input must load or fail with a Status, and a loaded tokenizer must encode and
// decode without crashing.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "engine/tokenizer.h"

namespace penstock::engine {
namespace {

using nlohmann::json;

constexpr uint64_t kSeed = 20261130;

std::string bundled() {
    std::ifstream in(std::string(PENSTOCK_ASSETS_DIR) + "/tiny-deepseek-v3/tokenizer.json", std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

json random_value(std::mt19937_64& rng) {
    switch (rng() % 14) {
        case 0:
            return nullptr;
        case 1:
            return true;
        case 2:
            return 0;
        case 3:
            return -7;
        case 4:
            return int64_t{1} << 40;
        case 5:
            return 3.5;
        case 6:
            return "";
        case 7:
            return "x";
        case 8:
            return "(((";
        case 9:
            return json::array();
        case 10:
            return json::object();
        case 11:
            return json{{"type", "Sequence"}};
        case 12:
            return json::array({json::array({"a", "b"})});
        default:
            return json{{"Regex", "\\p{L}+"}};
    }
}

void mutate(json& j, std::mt19937_64& rng) {
    if ((j.is_object() || j.is_array()) && !j.empty() && rng() % 5 != 0) {
        auto it = j.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % j.size()));
        mutate(*it, rng);
        return;
    }
    j = random_value(rng);
}

// Returns whether the input loaded.
bool exercise(const std::string& text, uint64_t iteration) {
    SCOPED_TRACE("seed " + std::to_string(kSeed) + " iteration " + std::to_string(iteration));
    auto tok = Tokenizer::from_json(text, "fuzz/tokenizer.json");
    if (!tok.ok()) {
        EXPECT_FALSE(tok.status().message().empty());
        return false;
    }
    auto ids = (*tok)->encode("Hello, 世界! 123 <think> ACME \t\n", true);
    if (!ids.ok()) return true;
    std::vector<int32_t> with_junk = *ids;
    with_junk.push_back(-1);
    with_junk.push_back(1 << 30);
    (void)(*tok)->decode(with_junk, false);
    DecodeStream stream(**tok, true);
    for (int32_t id : with_junk) (void)stream.step(id);
    (void)stream.flush();
    return true;
}

TEST(TokenizerFuzz, StructuralMutationsNeverCrash) {
    const json base = json::parse(bundled());
    std::mt19937_64 rng(kSeed);
    int loaded = 0;
    for (uint64_t i = 0; i < 1500; ++i) {
        json j = base;
        const int n = 1 + static_cast<int>(rng() % 3);
        for (int k = 0; k < n; ++k) mutate(j, rng);
        loaded += exercise(j.dump(), i) ? 1 : 0;
    }
    std::printf("[ fuzz ] structural: %d of 1500 mutated files loaded and were exercised\n", loaded);
    EXPECT_GT(loaded, 100);  // the mutations must also reach encode/decode, not only the parser
}

TEST(TokenizerFuzz, ByteMutationsNeverCrash) {
    const std::string base = bundled();
    std::mt19937_64 rng(kSeed + 1);
    int loaded = 0;
    for (uint64_t i = 0; i < 1500; ++i) {
        std::string s = base;
        switch (rng() % 4) {
            case 0:
                s.resize(rng() % s.size());
                break;
            case 1:
                for (int k = 0; k < 8; ++k) s[rng() % s.size()] = static_cast<char>(rng() & 0xFF);
                break;
            case 2: {
                const size_t a = rng() % s.size(), b = rng() % s.size();
                s.insert(a, s.substr(b, rng() % 64));
                break;
            }
            default:
                s.erase(rng() % s.size(), rng() % 32);
                break;
        }
        loaded += exercise(s, i) ? 1 : 0;
    }
    std::printf("[ fuzz ] bytes: %d of 1500 mutated files loaded and were exercised\n", loaded);
}

}  // namespace
}  // namespace penstock::engine
