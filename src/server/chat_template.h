// ChatTemplate: a small Jinja2 subset, enough for the chat templates most tokenizer_config.json files ship:
// text, {{ expr }}, {% if/elif/else/endif %}, {% for x in expr %}...{% endfor %} (loop.index0/index/first/last/
// length), {% set x = expr %}, whitespace control ({%- -%} {{- -}}) with transformers' trim_blocks/lstrip_blocks,
// expressions with string/int/bool/none literals, names, .attr and [key], +, ~, ==, !=, in, not, and, or,
// `is [not] defined/none/string`, the trim filter and raise_exception(). Anything else is Unimplemented at parse
// time, and the server then uses its documented builtin template. Immutable after parse; thread-safe to render.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace penstock::server {

struct ChatMessage {
    std::string role;
    std::string content;
};

class ChatTemplate final {
public:
    // InvalidArgument for malformed templates, Unimplemented for constructs outside the subset.
    [[nodiscard]] static Result<std::shared_ptr<const ChatTemplate>> parse(std::string_view source);
    // Renders with messages, bos_token, eos_token and add_generation_prompt = true. InvalidArgument when the
    // template raises (raise_exception) or evaluates something it cannot (e.g. + on a list).
    [[nodiscard]] Result<std::string> render(const std::vector<ChatMessage>& messages, const std::string& bos,
                                             const std::string& eos) const;

    struct Node;
    ~ChatTemplate();

private:
    ChatTemplate();
    std::unique_ptr<Node> root_;
};

}  // namespace penstock::server
