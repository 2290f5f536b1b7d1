// ChatTemplate (the Jinja subset): the embedded model's tokenizer_config template renders exactly like the builtin
// template; a Llama-3-style template with whitespace control, loop variables, set and raise_exception; refusal of
// constructs outside the subset (Unimplemented, so the server falls back to the builtin template).
#include "server/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/api.h"

namespace penstock::server {
namespace {

TEST(ChatTemplate, EmbeddedModelTemplateMatchesBuiltin) {
    std::ifstream f(std::string(PENSTOCK_ASSETS_DIR) + "/tiny-deepseek-v3/tokenizer_config.json");
    std::stringstream ss;
    ss << f.rdbuf();
    const nlohmann::json cfg = nlohmann::json::parse(ss.str());
    auto t = ChatTemplate::parse(cfg["chat_template"].get<std::string>());
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    const std::vector<std::vector<ChatMessage>> cases = {
        {{"user", "hi"}},
        {{"system", "be brief"}, {"user", "hi"}, {"assistant", "hello"}, {"user", "again\n  with spaces "}},
        {{"assistant", ""}},
    };
    for (const auto& msgs : cases) {
        auto r = (*t)->render(msgs, "<BOS>", "<EOS>");
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        EXPECT_EQ(*r, render_chat(msgs, "<BOS>", "<EOS>"));
    }
}

TEST(ChatTemplate, LlamaStyleTemplate) {
    const std::string src =
        "{{- bos_token }}\n"
        "{%- if messages[0]['role'] == 'system' %}\n"
        "    {%- set system = messages[0]['content'] | trim %}\n"
        "{%- else %}\n"
        "    {%- set system = 'default' %}\n"
        "{%- endif %}\n"
        "{{- '<|sys|>' + system + '<|eot|>' }}\n"
        "{%- for message in messages %}\n"
        "    {%- if message.role == 'system' %}{% continue_is_not_used = 1 if false else '' %}{% endif %}\n"
        "{%- endfor %}\n";
    // `continue_is_not_used = ...` is not a supported tag: refused, not mis-rendered.
    EXPECT_EQ(ChatTemplate::parse(src).status().code(), StatusCode::kUnimplemented);

    const std::string ok_src =
        "{{- bos_token }}\n"
        "{%- if messages[0]['role'] == 'system' %}\n"
        "    {%- set system = messages[0]['content'] | trim %}\n"
        "{%- else %}\n"
        "    {%- set system = 'default' %}\n"
        "{%- endif %}\n"
        "{{- '<|sys|>' + system + '<|eot|>' }}\n"
        "{%- for message in messages if true %}{% endfor %}";
    EXPECT_EQ(ChatTemplate::parse(ok_src).status().code(), StatusCode::kUnimplemented);

    const std::string llama =
        "{{- bos_token }}\n"
        "{%- if messages[0]['role'] == 'system' %}\n"
        "    {%- set system = messages[0]['content'] | trim %}\n"
        "{%- else %}\n"
        "    {%- set system = \"default\" %}\n"
        "{%- endif %}\n"
        "{{- '<|sys|>' + system + '<|eot|>' }}\n"
        "{%- for message in messages %}\n"
        "    {%- if message.role != 'system' %}\n"
        "        {%- if (message.role == 'user') != (loop.index0 % 2 == 1) %}{% endif %}\n"
        "    {%- endif %}\n"
        "{%- endfor %}";
    EXPECT_FALSE(ChatTemplate::parse(llama).ok());  // '%' operator: outside the subset

    const std::string simple =
        "{{- bos_token }}\n"
        "{%- if messages[0]['role'] == 'system' %}\n"
        "    {%- set system = messages[0]['content'] | trim %}\n"
        "{%- else %}\n"
        "    {%- set system = \"default\" %}\n"
        "{%- endif %}\n"
        "{{- '<|sys|>' + system + '<|eot|>' }}\n"
        "{%- for message in messages %}\n"
        "    {%- if message.role == 'system' %}\n"
        "    {%- elif message['role'] not in ['user', 'assistant'] %}\n"
        "        {{- raise_exception('bad role ' ~ message.role) }}\n"
        "    {%- else %}\n"
        "        {{- '<|' + message.role + '|>' + message.content + '<|eot|>' }}\n"
        "        {%- if loop.last %}{{ '#' ~ loop.index }}{% endif %}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}";
    EXPECT_FALSE(ChatTemplate::parse(simple).ok());  // list literal ['user', 'assistant'] is outside the subset

    const std::string supported =
        "{{- bos_token }}\n"
        "{%- if messages[0]['role'] == 'system' %}\n"
        "    {%- set system = messages[0]['content'] | trim %}\n"
        "{%- else %}\n"
        "    {%- set system = \"default\" %}\n"
        "{%- endif %}\n"
        "{{- '<|sys|>' + system + '<|eot|>' }}\n"
        "{%- for message in messages %}\n"
        "    {%- if message.role == 'system' %}\n"
        "    {%- elif message['role'] != 'user' and message.role != 'assistant' %}\n"
        "        {{- raise_exception('bad role ' ~ message.role) }}\n"
        "    {%- else %}\n"
        "        {{- '<|' + message.role + '|>' + message.content + '<|eot|>' }}\n"
        "        {%- if loop.last %}{{ '#' ~ loop.index }}{% endif %}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}";
    auto t = ChatTemplate::parse(supported);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    auto r = (*t)->render({{"system", "  sys  "}, {"user", "u1"}, {"assistant", "a1"}}, "<s>", "</s>");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(*r, "<s><|sys|>sys<|eot|><|user|>u1<|eot|><|assistant|>a1<|eot|>#3<|assistant|>");
    r = (*t)->render({{"user", "u"}}, "<s>", "</s>");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, "<s><|sys|>default<|eot|><|user|>u<|eot|>#1<|assistant|>");
    r = (*t)->render({{"tool", "x"}}, "<s>", "</s>");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("bad role tool"), std::string::npos);
}

TEST(ChatTemplate, TrimBlocksAndLstripBlocks) {
    auto t = ChatTemplate::parse("A\n  {% if true %}\nB\n  {% endif %}\nC{# comment #}\n");
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    auto r = (*t)->render({}, "", "");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, "A\nB\nC");  // jinja2 2.x/3.x with trim_blocks + lstrip_blocks (checked with the package)
    t = ChatTemplate::parse("x {% if true %}y{% endif %}  \n  {{ 1 }} {%- if true -%}  z  {% endif %}");
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    r = (*t)->render({}, "", "");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, "x y  \n  1z  ");
}

TEST(ChatTemplate, MalformedTemplatesAreErrors) {
    EXPECT_FALSE(ChatTemplate::parse("{% if x %}no end").ok());
    EXPECT_FALSE(ChatTemplate::parse("{{ 'unterminated }}").ok());
    EXPECT_FALSE(ChatTemplate::parse("{% endfor %}").ok());
    EXPECT_EQ(ChatTemplate::parse("{% macro m() %}{% endmacro %}").status().code(), StatusCode::kUnimplemented);
    EXPECT_EQ(ChatTemplate::parse("{{ x | length }}").status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace penstock::server
