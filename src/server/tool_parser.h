// Tool calls in a chat model's output: the markup each model family's chat template teaches the model, parsed back
// into OpenAI's `tool_calls` (SGLang's --tool-call-parser names). Pure functions of the text: no tokenizer, no
// sockets. docs/design/server.md "Tool calls" is the policy: text outside the markup stays content, a call whose
// markup is malformed or cut off (max_tokens) stays content too, so nothing the model wrote is lost.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace penstock::server {

enum class ToolCallFormat : uint8_t {
    kNone,        // no parser: tool markup is plain content
    kDeepSeekV3,  // <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
    kDeepSeekV31,  // <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>
    kKimiK2,       // <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>
    kGlm45,        // <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call> (newlines optional)
    kHermes,       // <tool_call>{"name": NAME, "arguments": ARGS}</tool_call> (Qwen 2.5 / 3)
};

// SGLang's parser names: deepseekv3, deepseekv31, kimi_k2, glm45 (glm47, glm), qwen25 (qwen, hermes); "none".
[[nodiscard]] Result<ToolCallFormat> tool_call_format_from_name(std::string_view name);
[[nodiscard]] std::string_view tool_call_format_name(ToolCallFormat f);
// The format a chat template teaches, from the markers it writes for assistant tool calls; kNone when none is known.
[[nodiscard]] ToolCallFormat detect_tool_call_format(std::string_view chat_template);

struct ToolCall {
    std::string id;  // Kimi's own "functions.NAME:IDX"; otherwise empty (the server names it)
    std::string name;
    std::string arguments;  // a JSON object, as OpenAI's function.arguments string
};

struct ToolCallParse {
    std::string content;  // the text outside well-formed tool-call markup
    std::vector<ToolCall> calls;
};

// Splits a whole completion into content and calls. Never fails: markup that does not parse stays content. `tools`
// (the request's, or null) gives GLM's parameter types: a value of a "string" parameter is its text as written,
// any other is a JSON literal when it parses as one. Content that is only whitespace around calls becomes empty.
[[nodiscard]] ToolCallParse parse_tool_calls(ToolCallFormat format, std::string_view text,
                                             const nlohmann::json* tools = nullptr);

// The streaming form: feed() returns the content that can be sent now. It holds back text from the first byte that
// may start tool-call markup (a prefix of the format's opening marker) until it is known not to; from an opening
// marker on everything is buffered, and finish() parses it: the calls are parse_tool_calls(format, whole)'s, and
// the feed()s and finish().content together are its content (whitespace sent before the markup stays sent).
class ToolCallStream {
public:
    explicit ToolCallStream(ToolCallFormat format) : format_(format) {}
    [[nodiscard]] std::string feed(std::string_view delta);
    [[nodiscard]] ToolCallParse finish(const nlohmann::json* tools = nullptr);

private:
    ToolCallFormat format_;
    std::string pending_;  // not yet sent: a possible marker prefix, or everything from a marker on
    bool in_markup_ = false;
};

}  // namespace penstock::server
