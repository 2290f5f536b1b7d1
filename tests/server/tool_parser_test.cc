// Tool-call markup of each family parsed back into calls; malformed or cut-off markup stays content; the streaming
// form holds back only what may start markup and ends with the same calls as the whole-text parse.
#include "server/tool_parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/api.h"
#include "server/chat_template.h"

namespace penstock::server {
namespace {

const std::string kDsBegin = "<｜tool▁calls▁begin｜>";
const std::string kDsEnd = "<｜tool▁calls▁end｜>";
const std::string kDsCall = "<｜tool▁call▁begin｜>";
const std::string kDsCallEnd = "<｜tool▁call▁end｜>";
const std::string kDsSep = "<｜tool▁sep｜>";

std::string ds_v3_call(const std::string& name, const std::string& args) {
    return kDsCall + "function" + kDsSep + name + "\n```json\n" + args + "\n```" + kDsCallEnd;
}

TEST(ToolParser, FormatNamesAndDetection) {
    for (const char* n : {"deepseekv3", "deepseekv31", "kimi_k2", "glm45", "qwen25", "none"}) {
        auto f = tool_call_format_from_name(n);
        ASSERT_TRUE(f.ok()) << n;
        EXPECT_EQ(tool_call_format_name(*f), n);
    }
    auto bad = tool_call_format_from_name("llama4");
    EXPECT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("unknown tool-call parser 'llama4'"), std::string::npos);

    EXPECT_EQ(detect_tool_call_format("{{'" + kDsBegin + "'}}{{'" + kDsCall + "' + tool['type'] + '" + kDsSep +
                                      "' + name + '\\n```json\\n'}}"),
              ToolCallFormat::kDeepSeekV3);
    EXPECT_EQ(detect_tool_call_format("{{'" + kDsCall + "' + name + '" + kDsSep + "' + args}}"),
              ToolCallFormat::kDeepSeekV31);
    EXPECT_EQ(detect_tool_call_format("<|tool_calls_section_begin|>{% for c in calls %}"), ToolCallFormat::kKimiK2);
    EXPECT_EQ(detect_tool_call_format("<tool_call>{{ name }}<arg_key>{{ k }}</arg_key>"), ToolCallFormat::kGlm45);
    EXPECT_EQ(detect_tool_call_format("<tool_call>\\n{{ call | tojson }}\\n</tool_call>"), ToolCallFormat::kHermes);
    EXPECT_EQ(detect_tool_call_format("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"),
              ToolCallFormat::kNone);
}

TEST(ToolParser, DeepSeekV3TwoCallsAfterText) {
    const std::string text = "Let me check." + kDsBegin + ds_v3_call("get_weather", R"({"city": "Tokyo"})") + "\n" +
                             ds_v3_call("get_time", R"({"tz": "JST", "fmt": {"h24": true}})") + kDsEnd;
    ToolCallParse p = parse_tool_calls(ToolCallFormat::kDeepSeekV3, text);
    EXPECT_EQ(p.content, "Let me check.");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(nlohmann::json::parse(p.calls[0].arguments), nlohmann::json({{"city", "Tokyo"}}));
    EXPECT_EQ(p.calls[1].name, "get_time");
    EXPECT_EQ(nlohmann::json::parse(p.calls[1].arguments)["fmt"]["h24"], true);
    EXPECT_TRUE(p.calls[0].id.empty());
}

TEST(ToolParser, DeepSeekV31) {
    const std::string text =
        kDsBegin + kDsCall + "search" + kDsSep + R"({"q": "penstock", "n": 3})" + kDsCallEnd + kDsEnd;
    ToolCallParse p = parse_tool_calls(ToolCallFormat::kDeepSeekV31, text);
    EXPECT_EQ(p.content, "");
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].name, "search");
    EXPECT_EQ(p.calls[0].arguments, R"({"q": "penstock", "n": 3})");
}

TEST(ToolParser, KimiK2KeepsItsCallIds) {
    const std::string text =
        "ok <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        R"({"city": "Paris"})"
        "<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>"
        R"({"city": "Oslo"})"
        "<|tool_call_end|><|tool_calls_section_end|>";
    ToolCallParse p = parse_tool_calls(ToolCallFormat::kKimiK2, text);
    EXPECT_EQ(p.content, "ok ");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].id, "functions.get_weather:0");
    EXPECT_EQ(p.calls[1].id, "functions.get_weather:1");
    EXPECT_EQ(p.calls[1].name, "get_weather");
    EXPECT_EQ(p.calls[1].arguments, R"({"city": "Oslo"})");
}

TEST(ToolParser, Glm45ArgumentsFollowTheDeclaredTypes) {
    const nlohmann::json tools = nlohmann::json::parse(R"([{"type": "function", "function": {"name": "book",
        "parameters": {"type": "object", "properties": {"room": {"type": "string"}, "nights": {"type": "integer"},
        "opts": {"type": "object"}}}}}])");
    const std::string text =
        "<tool_call>book\n<arg_key>room</arg_key>\n<arg_value>101</arg_value>\n<arg_key>nights</arg_key>\n"
        "<arg_value>3</arg_value>\n<arg_key>opts</arg_key><arg_value>{\"late\": true}</arg_value>\n</tool_call>"
        "<tool_call>ping</tool_call>";
    ToolCallParse p = parse_tool_calls(ToolCallFormat::kGlm45, text, &tools);
    ASSERT_EQ(p.calls.size(), 2u);
    const auto args = nlohmann::json::parse(p.calls[0].arguments);
    EXPECT_EQ(args["room"], "101");  // declared a string: kept as written
    EXPECT_EQ(args["nights"], 3);
    EXPECT_EQ(args["opts"]["late"], true);
    EXPECT_EQ(p.calls[1].name, "ping");
    EXPECT_EQ(p.calls[1].arguments, "{}");
    // Without the schema a number-looking value is a number, and free text is a string.
    p = parse_tool_calls(ToolCallFormat::kGlm45,
                         "<tool_call>book<arg_key>room</arg_key><arg_value>101</arg_value><arg_key>note</arg_key>"
                         "<arg_value>sea view</arg_value></tool_call>");
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(nlohmann::json::parse(p.calls[0].arguments), nlohmann::json({{"room", 101}, {"note", "sea view"}}));
}

TEST(ToolParser, HermesJsonCalls) {
    const std::string text =
        "Sure.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>\n"
        "<tool_call>{\"name\": \"noop\", \"arguments\": \"{\\\"x\\\": null}\"}</tool_call>";
    ToolCallParse p = parse_tool_calls(ToolCallFormat::kHermes, text);
    EXPECT_EQ(p.content, "Sure.\n\n");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(nlohmann::json::parse(p.calls[0].arguments), nlohmann::json({{"a", 1}, {"b", 2}}));
    EXPECT_EQ(p.calls[1].arguments, R"({"x": null})");
}

TEST(ToolParser, MalformedOrCutOffMarkupStaysContent) {
    // Cut off by max_tokens inside the arguments.
    const std::string cut = "Hi " + kDsBegin + kDsCall + "function" + kDsSep + "f\n```json\n{\"a\": ";
    ToolCallParse p = parse_tool_calls(ToolCallFormat::kDeepSeekV3, cut);
    EXPECT_TRUE(p.calls.empty());
    EXPECT_EQ(p.content, cut);
    // Arguments that are not a JSON object.
    const std::string bad = kDsBegin + ds_v3_call("f", "[1, 2]") + kDsEnd;
    p = parse_tool_calls(ToolCallFormat::kDeepSeekV3, bad);
    EXPECT_TRUE(p.calls.empty());
    EXPECT_EQ(p.content, bad);
    // One good section, then a broken one: the first's call, the broken one as content.
    const std::string mixed = kDsBegin + ds_v3_call("f", "{}") + kDsEnd + " then " + kDsBegin + "junk";
    p = parse_tool_calls(ToolCallFormat::kDeepSeekV3, mixed);
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.content, " then " + kDsBegin + "junk");
    // Hermes without a name; GLM with a value that never closes; Kimi without its argument marker.
    EXPECT_TRUE(parse_tool_calls(ToolCallFormat::kHermes, "<tool_call>{\"arguments\": {}}</tool_call>").calls.empty());
    EXPECT_TRUE(parse_tool_calls(ToolCallFormat::kGlm45, "<tool_call>f<arg_key>a</arg_key><arg_value>1</tool_call>")
                    .calls.empty());
    EXPECT_TRUE(
        parse_tool_calls(ToolCallFormat::kKimiK2, "<|tool_call_begin|>functions.f:0{}<|tool_call_end|>").calls.empty());
    // No parser: everything is content.
    p = parse_tool_calls(ToolCallFormat::kNone, "<tool_call>{\"name\": \"f\"}</tool_call>");
    EXPECT_TRUE(p.calls.empty());
    EXPECT_EQ(p.content, "<tool_call>{\"name\": \"f\"}</tool_call>");
}

// Every split of the text into two or three deltas streams the same content and calls as the whole-text parse.
TEST(ToolParser, StreamingMatchesTheWholeTextAtEverySplit) {
    const std::vector<std::pair<ToolCallFormat, std::string>> cases = {
        {ToolCallFormat::kDeepSeekV3, "Checking <tool" + kDsBegin + ds_v3_call("f", R"({"a": 1})") + kDsEnd + "!"},
        {ToolCallFormat::kKimiK2,
         "x<|tool<|tool_calls_section_begin|><|tool_call_begin|>functions.g:0<|tool_call_argument_begin|>{}"
         "<|tool_call_end|><|tool_calls_section_end|>"},
        {ToolCallFormat::kHermes, "a < b <tool_call>{\"name\": \"h\", \"arguments\": {}}</tool_call>"},
        {ToolCallFormat::kGlm45, "no calls at all, only <tool text"},
    };
    for (const auto& [format, text] : cases) {
        const ToolCallParse whole = parse_tool_calls(format, text);
        for (size_t i = 0; i <= text.size(); ++i) {
            for (size_t j = i; j <= text.size(); j += 7) {
                ToolCallStream s(format);
                std::string content = s.feed(text.substr(0, i));
                content += s.feed(text.substr(i, j - i));
                content += s.feed(text.substr(j));
                ToolCallParse end = s.finish();
                content += end.content;
                ASSERT_EQ(content, whole.content) << "split " << i << "/" << j << " of " << text;
                ASSERT_EQ(end.calls.size(), whole.calls.size());
                for (size_t k = 0; k < end.calls.size(); ++k) {
                    EXPECT_EQ(end.calls[k].name, whole.calls[k].name);
                    EXPECT_EQ(end.calls[k].arguments, whole.calls[k].arguments);
                }
            }
        }
    }
    // Text that cannot start a marker is sent at once; a possible marker prefix is held back.
    ToolCallStream s(ToolCallFormat::kHermes);
    EXPECT_EQ(s.feed("hello <tool"), "hello ");
    EXPECT_EQ(s.feed("box>"), "<toolbox>");
}

// Real checkpoints' chat templates (tests/data/chat_templates) write an assistant's tool calls in the markup of the
// format detected from them, and that parser reads the same call back: the server's "auto" pairing is consistent.
// The arguments are OpenAI's JSON string, rendered as the server does (render_openai_chat).
TEST(ToolParser, RealTemplatesRoundTripTheirToolCalls) {
    const std::vector<std::pair<std::string, ToolCallFormat>> templates = {
        {"deepseek_v3_0324", ToolCallFormat::kDeepSeekV3}, {"kimi_k2_thinking", ToolCallFormat::kKimiK2},
        {"kimi_k2_instruct", ToolCallFormat::kNone},       {"glm_4_6", ToolCallFormat::kGlm45},
        {"qwen2_5_instruct", ToolCallFormat::kHermes},     {"qwen3", ToolCallFormat::kHermes},
        {"llama_3_1_instruct", ToolCallFormat::kNone},
    };
    const auto messages = nlohmann::ordered_json::parse(R"([
        {"role": "user", "content": "weather in Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "functions.get_weather:0", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Tokyo\", \"days\": 2}"}}]}])");
    for (const auto& [name, want] : templates) {
        std::ifstream f(std::string(PENSTOCK_CHAT_TEMPLATES_DIR) + "/" + name + ".jinja");
        ASSERT_TRUE(f.good()) << name;
        std::stringstream ss;
        ss << f.rdbuf();
        EXPECT_EQ(detect_tool_call_format(ss.str()), want) << name;
        if (want == ToolCallFormat::kNone) continue;
        auto t = ChatTemplate::parse(ss.str());
        ASSERT_TRUE(t.ok()) << name << ": " << t.status().to_string();
        RenderOptions o;
        o.bos_token = "<s>";
        o.eos_token = "</s>";
        o.add_generation_prompt = false;
        auto prompt = render_openai_chat(**t, messages, o);
        ASSERT_TRUE(prompt.ok()) << name << ": " << prompt.status().to_string();
        const ToolCallParse p = parse_tool_calls(want, *prompt);
        ASSERT_EQ(p.calls.size(), 1u) << name << " rendered:\n" << *prompt;
        EXPECT_EQ(p.calls[0].name, "get_weather") << name;
        EXPECT_EQ(nlohmann::json::parse(p.calls[0].arguments), nlohmann::json({{"city", "Tokyo"}, {"days", 2}}))
            << name << " rendered:\n"
            << *prompt;
    }
}

// Content-part lists reach templates that loop over contents as lists, and string-only templates as the joined text
// (DeepSeek's would fail on a list, Llama's would print its repr).
TEST(ToolParser, ContentPartsAreJoinedForStringOnlyTemplates) {
    const auto messages = nlohmann::ordered_json::parse(
        R"([{"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}]}])");
    for (const char* name : {"deepseek_v3_0324", "llama_3_1_instruct", "qwen3", "glm_4_6", "kimi_k2_instruct"}) {
        std::ifstream f(std::string(PENSTOCK_CHAT_TEMPLATES_DIR) + "/" + name + ".jinja");
        std::stringstream ss;
        ss << f.rdbuf();
        auto t = ChatTemplate::parse(ss.str());
        ASSERT_TRUE(t.ok()) << name;
        auto prompt = render_openai_chat(**t, messages, RenderOptions{});
        ASSERT_TRUE(prompt.ok()) << name << ": " << prompt.status().to_string();
        EXPECT_NE(prompt->find("abcd"), std::string::npos) << name << ":\n" << *prompt;
        EXPECT_EQ(prompt->find("'type'"), std::string::npos) << name << " printed the list:\n" << *prompt;
    }
}

}  // namespace
}  // namespace penstock::server
