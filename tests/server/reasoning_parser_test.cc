// Reasoning split out of thinking models' outputs: each parser's tags, a prompt-opened (forced) reasoning, an output
// that never closes it, Kimi K2's tool-call section ending it, and the streaming form equal to the whole-text parse
// at every split.
#include "server/reasoning_parser.h"

#include <gtest/gtest.h>

#include <vector>

namespace penstock::server {
namespace {

ReasoningFormat fmt(const char* name) {
    auto f = reasoning_format_from_name(name);
    EXPECT_TRUE(f.ok()) << name;
    return f.ok() ? *f : ReasoningFormat{};
}

TEST(ReasoningParser, Names) {
    for (const char* n : {"deepseek-r1", "deepseek-v3", "qwen3", "qwen3-thinking", "glm45", "kimi", "kimi_k2"}) {
        EXPECT_TRUE(fmt(n).on()) << n;
    }
    EXPECT_FALSE(fmt("none").on());
    auto bad = reasoning_format_from_name("o1");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("unknown reasoning parser 'o1'"), std::string::npos);
}

TEST(ReasoningParser, WholeTexts) {
    ReasoningParse p = parse_reasoning(fmt("qwen3"), "\n<think>step 1\nstep 2</think>\n\nThe answer is 4.");
    EXPECT_EQ(p.reasoning, "step 1\nstep 2");
    EXPECT_EQ(p.content, "The answer is 4.");
    // Not opened by the output: all content, for a non-forced parser.
    p = parse_reasoning(fmt("glm45"), "Just 4. </think> stays");
    EXPECT_EQ(p.reasoning, "");
    EXPECT_EQ(p.content, "Just 4. </think> stays");
    // DeepSeek-R1: the prompt opened the reasoning; a start tag in the output is dropped too.
    p = parse_reasoning(fmt("deepseek-r1"), "hmm, 2+2</think>4");
    EXPECT_EQ(p.reasoning, "hmm, 2+2");
    EXPECT_EQ(p.content, "4");
    p = parse_reasoning(fmt("deepseek-r1"), "<think>hmm</think>4");
    EXPECT_EQ(p.reasoning, "hmm");
    EXPECT_EQ(p.content, "4");
    // Never closed (max_tokens): all reasoning.
    p = parse_reasoning(fmt("deepseek-r1"), "still thinking about");
    EXPECT_EQ(p.reasoning, "still thinking about");
    EXPECT_EQ(p.content, "");
    p = parse_reasoning(fmt("kimi"), "◁think▷plan◁/think▷done");
    EXPECT_EQ(p.reasoning, "plan");
    EXPECT_EQ(p.content, "done");
    // Kimi K2: the tool-call section ends the reasoning and stays content for the tool parser.
    p = parse_reasoning(fmt("kimi_k2"), "<think>call it<|tool_calls_section_begin|><|tool_call_begin|>x");
    EXPECT_EQ(p.reasoning, "call it");
    EXPECT_EQ(p.content, "<|tool_calls_section_begin|><|tool_call_begin|>x");
    // Off: everything is content.
    p = parse_reasoning(fmt("none"), "<think>a</think>b");
    EXPECT_EQ(p.content, "<think>a</think>b");
}

TEST(ReasoningParser, StreamingEqualsWholeAtEverySplit) {
    const std::vector<std::pair<const char*, std::string>> cases = {
        {"qwen3", "  <think>a </thin b</think>\n \nc <think> d"},
        {"qwen3", "<thin"},
        {"qwen3", "no reasoning here"},
        {"deepseek-r1", "x</think>"},
        {"deepseek-r1", "<think>\nx</think>  y"},
        {"kimi", "◁think▷◁/think▷◁/think▷"},
        {"kimi_k2", "<think>r<|tool_calls_sec<|tool_calls_section_begin|>t</think>"},
    };
    for (const auto& [name, text] : cases) {
        const ReasoningFormat f = fmt(name);
        const ReasoningParse whole = parse_reasoning(f, text);
        for (size_t i = 0; i <= text.size(); ++i) {
            for (size_t j = i; j <= text.size(); ++j) {
                ReasoningStream s(f);
                ReasoningParse got;
                for (std::string_view piece :
                     {std::string_view(text).substr(0, i), std::string_view(text).substr(i, j - i),
                      std::string_view(text).substr(j)}) {
                    ReasoningParse p = s.feed(piece);
                    got.reasoning += p.reasoning;
                    got.content += p.content;
                }
                ReasoningParse end = s.finish();
                ASSERT_EQ(got.reasoning + end.reasoning, whole.reasoning) << name << " " << i << "/" << j;
                ASSERT_EQ(got.content + end.content, whole.content) << name << " " << i << "/" << j;
            }
        }
    }
    // Reasoning streams as it comes; only a possible end-tag prefix waits.
    ReasoningStream s(fmt("qwen3"));
    EXPECT_EQ(s.feed("<think>abc</th").reasoning, "abc");
    ReasoningParse p = s.feed("ink>def");
    EXPECT_EQ(p.reasoning, "");
    EXPECT_EQ(p.content, "def");
}

}  // namespace
}  // namespace penstock::server
