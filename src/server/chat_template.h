// ChatTemplate: a Hugging Face chat template (Jinja2) rendered as transformers renders it: jinja2 with
// trim_blocks, lstrip_blocks and loop controls, autoescape off, transformers' tojson filter and its globals
// raise_exception / strftime_now, the sandbox's refusal of mutating list methods. The interpreter lives in
// server/jinja_*.{h,cc}; docs/design/server.md lists what of Jinja2 is not supported. Immutable after parse;
// thread-safe to render concurrently.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace penstock::server {

namespace jinja {
struct Program;
}

struct ChatMessage {
    std::string role;
    std::string content;
};

struct RenderOptions {
    std::string bos_token;
    std::string eos_token;
    bool add_generation_prompt = true;
    // The request's tools (a JSON array); null: none given, and the template sees `tools` as none (as transformers).
    nlohmann::ordered_json tools;
    // chat_template_kwargs: an object whose keys become top-level template variables (overriding the above).
    nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

class ChatTemplate final {
public:
    // InvalidArgument for templates that do not parse (the message names the template line).
    [[nodiscard]] static Result<std::shared_ptr<const ChatTemplate>> parse(std::string_view source);
    // Renders `messages` (a JSON array of message objects, passed as is) with the context transformers builds:
    // messages, tools, documents (none), add_generation_prompt, bos_token, eos_token, then kwargs. InvalidArgument
    // when the template raises (raise_exception: its message), touches an undefined value, hits a type error or a
    // resource limit (server/jinja_interp.h).
    [[nodiscard]] Result<std::string> render(const nlohmann::ordered_json& messages, const RenderOptions& o) const;
    // Role + content strings only, add_generation_prompt = true.
    [[nodiscard]] Result<std::string> render(const std::vector<ChatMessage>& messages, const std::string& bos,
                                             const std::string& eos) const;
    // Whether the template reads content-part lists: some `for` loop iterates over a `content` (a name `content`,
    // `x.content`, `x['content']`, `x.get('content')`) or binds a loop variable named `content`. Templates that do
    // not (DeepSeek-V3, Qwen, Llama 3.1) only work on string content, so callers flatten text parts for them (vLLM's
    // "auto" chat-template content format, decided the same way).
    [[nodiscard]] bool takes_content_parts() const { return takes_content_parts_; }

    ~ChatTemplate();

private:
    ChatTemplate();
    std::unique_ptr<jinja::Program> program_;
    bool takes_content_parts_ = false;
};

}  // namespace penstock::server
