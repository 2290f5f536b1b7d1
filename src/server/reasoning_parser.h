// A thinking model's reasoning split out of its chat output into OpenAI-style `reasoning_content` (SGLang's
// --reasoning-parser names). Pure functions of the text. docs/design/server.md "Reasoning" is the policy: the
// reasoning is the text between the start and end tags (the start tag may be missing where the parser says the model
// starts in reasoning: the prompt opened it); the content is what follows the end tag, its leading whitespace dropped;
// an output that never closes its reasoning is all reasoning.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace penstock::server {

struct ReasoningFormat {
    std::string_view start;     // "<think>"
    std::string_view end;       // "</think>"
    bool forced = false;        // the output starts in reasoning even without `start` (the prompt opened it)
    std::string_view implicit;  // where reasoning also ends without `end` (Kimi K2: its tool-call section), or ""
    bool on() const { return !end.empty(); }
};

// deepseek-r1 (forced), deepseek-v3, qwen3, glm45 (<think> only when the output opens it), qwen3-thinking (forced),
// kimi (◁think▷ ... ◁/think▷), kimi_k2 (<think>, ended by </think> or its tool-call section); "none": off.
[[nodiscard]] Result<ReasoningFormat> reasoning_format_from_name(std::string_view name);

struct ReasoningParse {
    std::string reasoning;
    std::string content;
};

[[nodiscard]] ReasoningParse parse_reasoning(const ReasoningFormat& f, std::string_view text);

// The streaming form: each feed() returns the reasoning and content that can be sent now; a possible tag prefix at
// the end is held back until it is known. The feeds' parts and finish()'s together equal parse_reasoning(whole).
class ReasoningStream {
public:
    explicit ReasoningStream(ReasoningFormat f) : f_(f) {}
    [[nodiscard]] ReasoningParse feed(std::string_view delta);
    [[nodiscard]] ReasoningParse finish();

private:
    enum class State : uint8_t { kStart, kReasoning, kContentStart, kContent };
    ReasoningParse step(bool last);

    ReasoningFormat f_;
    State state_ = State::kStart;
    std::string pending_;
};

}  // namespace penstock::server
