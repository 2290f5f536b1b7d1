// Chat requests with tools (parse_job) and their responses (ResponseWriter): tools are validated and refused where
// the server has no tool-call format; a completion's tool markup becomes message.tool_calls with finish_reason
// "tool_calls", whole and streamed (content before the markup streams at once, the calls come whole at the end).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "server/api.h"

namespace penstock::server {
namespace {

using nlohmann::json;

const std::string kTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";

class ApiTools : public ::testing::Test {
protected:
    void SetUp() override {
        auto tok = engine::Tokenizer::from_dir(std::string(PENSTOCK_ASSETS_DIR) + "/tiny-deepseek-v3");
        ASSERT_TRUE(tok.ok()) << tok.status().to_string();
        tokenizer_ = std::move(tok).value();
        ctx_ = ParseContext{.tokenizer = tokenizer_.get(),
                            .config = &config_,
                            .model_name = "tiny",
                            .max_context_len = 4096,
                            .vocab_size = 512,
                            .chat_template = nullptr,
                            .tool_format = ToolCallFormat::kDeepSeekV3,
                            .reasoning = {}};
    }
    ParseResult chat(const std::string& extra) {
        const std::string body = R"({"messages": [{"role": "user", "content": "weather in Tokyo?"}])" + extra + "}";
        return parse_job(ApiKind::kChat, body, ctx_);
    }

    ServerConfig config_;
    std::unique_ptr<engine::Tokenizer> tokenizer_;
    ParseContext ctx_;
};

TEST_F(ApiTools, ToolsAreValidatedAndRefusedWithoutAFormat) {
    ParseResult r = chat(R"(, "tools": )" + kTools);
    ASSERT_TRUE(r.job) << r.error.message;
    EXPECT_EQ(r.job->tool_format, ToolCallFormat::kDeepSeekV3);
    EXPECT_EQ(r.job->tools[0]["function"]["name"], "get_weather");
    EXPECT_FALSE(r.job->request.params.skip_special_tokens) << "tool markup may be special tokens";
    // The client's own skip_special_tokens wins.
    r = chat(R"(, "skip_special_tokens": true, "tools": )" + kTools);
    ASSERT_TRUE(r.job) << r.error.message;
    EXPECT_TRUE(r.job->request.params.skip_special_tokens);
    // tool_choice "none": valid tools, not shown to the model, nothing parsed.
    r = chat(R"(, "tool_choice": "none", "tools": )" + kTools);
    ASSERT_TRUE(r.job) << r.error.message;
    EXPECT_EQ(r.job->tool_format, ToolCallFormat::kNone);
    // No tools: nothing parsed, special tokens skipped as usual.
    r = chat("");
    ASSERT_TRUE(r.job);
    EXPECT_EQ(r.job->tool_format, ToolCallFormat::kNone);
    EXPECT_TRUE(r.job->request.params.skip_special_tokens);

    const std::vector<std::pair<std::string, std::string>> bad = {
        {R"(, "tools": {"type": "function"})", "tools: must be an array"},
        {R"(, "tools": [{"type": "code_interpreter"}])", "each tool must be"},
        {R"(, "tools": [{"type": "function", "function": {"name": ""}}])", "non-empty string name"},
        {R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])", "JSON Schema object"},
        {R"(, "tool_choice": "required", "tools": )" + kTools, "no constrained decoding"},
        {R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "tools": )" + kTools,
         "no constrained decoding"},
        {R"(, "tool_choice": "sometimes")", "must be \"auto\" or \"none\""},
        {R"(, "functions": [])", "functions"},
    };
    for (const auto& [extra, want] : bad) {
        r = chat(extra);
        EXPECT_FALSE(r.job) << extra;
        EXPECT_NE(r.error.message.find(want), std::string::npos) << extra << " -> " << r.error.message;
    }
    config_.max_tools = 1;
    r = chat(R"(, "tools": [)" + kTools.substr(1, kTools.size() - 2) + "," + kTools.substr(1));
    EXPECT_FALSE(r.job);
    EXPECT_NE(r.error.message.find("--max-tools"), std::string::npos) << r.error.message;

    ctx_.tool_format = ToolCallFormat::kNone;
    r = chat(R"(, "tools": )" + kTools);
    EXPECT_FALSE(r.job);
    EXPECT_NE(r.error.message.find("--tool-call-parser"), std::string::npos) << r.error.message;
    EXPECT_TRUE(chat(R"(, "tools": [], "tool_choice": "auto")").job) << "an empty tool list is no tools";
}

engine::RequestOutput event(const std::string& text, int32_t token, bool finished = false) {
    engine::RequestOutput ev;
    ev.text = text;
    ev.token_ids = {token};
    if (finished) {
        ev.finished = true;
        ev.finish_reason = "stop";
    }
    return ev;
}

const std::string kCall =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
    "{\"city\": \"Tokyo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";

TEST_F(ApiTools, ToolMarkupBecomesToolCallsWholeAndStreamed) {
    ParseResult r = chat(R"(, "tools": )" + kTools);
    ASSERT_TRUE(r.job) << r.error.message;
    const Job& job = *r.job;
    // Whole: the text before the markup is the content, the call is parsed, finish_reason is tool_calls.
    ResponseWriter w(job, "chatcmpl-1", 100);
    w.add(event("Checking. ", 5));
    w.add(event(kCall.substr(0, 30), 6));
    w.add(event(kCall.substr(30), 7, /*finished=*/true));
    const json body = json::parse(w.final_body());
    const json& choice = body["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    EXPECT_EQ(choice["message"]["content"], "Checking. ");
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
    const json& call = choice["message"]["tool_calls"][0];
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()), json({{"city", "Tokyo"}}));
    EXPECT_TRUE(call["id"].get<std::string>().starts_with("call_"));

    // Streamed: content, then the call in one tool_calls delta, then the finish chunk.
    ResponseWriter s(job, "chatcmpl-2", 100);
    std::string frames;
    for (const engine::RequestOutput& ev :
         {event("Checking. <", 5), event(kCall.substr(1, 40), 6), event(kCall.substr(41), 7, true)}) {
        s.add(ev);
        frames += s.sse_frames(ev);
    }
    std::string content;
    json calls = json::array();
    json finish;
    size_t at = 0;
    while ((at = frames.find("data: {", at)) != std::string::npos) {
        const size_t end = frames.find("\n\n", at);
        const json chunk = json::parse(frames.substr(at + 6, end - at - 6));
        at = end;
        const json& d = chunk["choices"][0]["delta"];
        if (d.contains("content")) content += d["content"].get<std::string>();
        if (d.contains("tool_calls")) calls = d["tool_calls"];
        if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(content, "Checking. ");
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0]["index"], 0);
    EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(finish, "tool_calls");
    EXPECT_NE(frames.find("data: [DONE]"), std::string::npos);

    // Markup cut off by max_tokens stays content; the finish reason stays length.
    ResponseWriter cut(job, "chatcmpl-3", 100);
    engine::RequestOutput last = event(kCall.substr(0, 60), 5, true);
    last.finish_reason = "length";
    cut.add(last);
    const json cb = json::parse(cut.final_body());
    EXPECT_EQ(cb["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(cb["choices"][0]["message"]["content"], kCall.substr(0, 60));
    EXPECT_FALSE(cb["choices"][0]["message"].contains("tool_calls"));
}

TEST_F(ApiTools, ReasoningThenToolCallsWholeAndStreamed) {
    ctx_.reasoning = *reasoning_format_from_name("qwen3");
    ASSERT_FALSE(chat(R"(, "separate_reasoning": false)").job->reasoning.on()) << "the request turns it off";
    ParseResult r = chat(R"(, "tools": )" + kTools);
    ASSERT_TRUE(r.job) << r.error.message;
    const std::string text = "<think>I need the weather</think>\n" + kCall;
    ResponseWriter w(*r.job, "chatcmpl-4", 100);
    w.add(event(text.substr(0, 12), 5));
    w.add(event(text.substr(12), 6, true));
    const json message = json::parse(w.final_body())["choices"][0]["message"];
    EXPECT_EQ(message["reasoning_content"], "I need the weather");
    EXPECT_TRUE(message["content"].is_null()) << message;
    ASSERT_EQ(message["tool_calls"].size(), 1u);
    EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");

    // Streamed in 5-byte pieces: reasoning deltas, no content, the call, finish tool_calls.
    ResponseWriter s(*r.job, "chatcmpl-5", 100);
    std::string reasoning, content, frames;
    json calls, finish;
    for (size_t at = 0; at < text.size(); at += 5) {
        const engine::RequestOutput ev = event(text.substr(at, 5), 7, at + 5 >= text.size());
        s.add(ev);
        frames += s.sse_frames(ev);
    }
    size_t at = 0;
    while ((at = frames.find("data: {", at)) != std::string::npos) {
        const size_t end = frames.find("\n\n", at);
        const json c = json::parse(frames.substr(at + 6, end - at - 6))["choices"][0];
        at = end;
        if (c["delta"].contains("reasoning_content")) reasoning += c["delta"]["reasoning_content"].get<std::string>();
        if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
        if (c["delta"].contains("tool_calls")) calls = c["delta"]["tool_calls"];
        if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
    EXPECT_EQ(reasoning, "I need the weather");
    EXPECT_EQ(content, "");
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(finish, "tool_calls");
}

}  // namespace
}  // namespace penstock::server
