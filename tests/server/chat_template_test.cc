// ChatTemplate (the Jinja interpreter): golden renders produced by Python jinja2 configured as transformers
// (tests/data/chat_templates/cases.json, written by tools/gen_chat_template_cases.py) for real checkpoints'
// templates and edge-semantics snippets, byte for byte; the embedded model's template; errors with line numbers;
// resource limits.
#include "server/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/api.h"

namespace penstock::server {
namespace {

using ojson = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

TEST(ChatTemplate, GoldenCasesMatchJinja2) {
    const std::string dir = PENSTOCK_CHAT_TEMPLATES_DIR;
    const ojson root = ojson::parse(read_file(dir + "/cases.json"));
    ASSERT_GT(root["cases"].size(), 100u);
    int n_checked = 0;
    for (const ojson& c : root["cases"]) {
        SCOPED_TRACE(c["name"].get<std::string>());
        const std::string source = c.contains("template_file")
                                       ? read_file(dir + "/" + c["template_file"].get<std::string>())
                                       : c["template"].get<std::string>();
        Result<std::shared_ptr<const ChatTemplate>> t = ChatTemplate::parse(source);
        RenderOptions o;
        o.bos_token = c["bos_token"].get<std::string>();
        o.eos_token = c["eos_token"].get<std::string>();
        o.add_generation_prompt = c["add_generation_prompt"].get<bool>();
        o.tools = c["tools"];
        o.kwargs = c["kwargs"];
        Result<std::string> r = t.ok() ? (*t)->render(c["messages"], o) : Result<std::string>(t.status());
        if (c.contains("expected")) {
            ASSERT_TRUE(r.ok()) << r.status().to_string();
            EXPECT_EQ(*r, c["expected"].get<std::string>());
        } else {
            ASSERT_FALSE(r.ok()) << "expected an error, rendered: " << *r;
            EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
            if (c.contains("raise")) {
                EXPECT_NE(r.status().message().find(c["raise"].get<std::string>()), std::string::npos)
                    << r.status().message();
            }
        }
        ++n_checked;
    }
    EXPECT_EQ(n_checked, static_cast<int>(root["cases"].size()));
}

TEST(ChatTemplate, TakesContentPartsWhenSomeLoopIteratesAContent) {
    const std::string dir = PENSTOCK_CHAT_TEMPLATES_DIR;
    const std::vector<std::pair<std::string, bool>> files = {
        {"deepseek_v3_0324", false}, {"deepseek_r1", false},     {"llama_3_1_instruct", false},
        {"qwen2_5_instruct", false}, {"qwen3", false},           {"glm_4_6", true},
        {"kimi_k2_instruct", true},  {"kimi_k2_thinking", true},
    };
    for (const auto& [name, parts] : files) {
        auto t = ChatTemplate::parse(read_file(dir + "/" + name + ".jinja"));
        ASSERT_TRUE(t.ok()) << name << ": " << t.status().to_string();
        EXPECT_EQ((*t)->takes_content_parts(), parts) << name;
    }
    const std::vector<std::pair<std::string, bool>> snippets = {
        {"{% for p in message.content %}{% endfor %}", true},
        {"{% for p in m['content'] if p.type == 'text' %}{% endfor %}", true},
        {"{% macro f(c) %}{% for p in c.get('content') %}{% endfor %}{% endmacro %}", true},
        {"{% if x %}{% for content in c %}{% endfor %}{% endif %}", true},
        {"{% for m in messages %}{{ m.content }}{% endfor %}", false},
        {"{{ message.content | join }}", false},
    };
    for (const auto& [src, parts] : snippets) {
        auto t = ChatTemplate::parse(src);
        ASSERT_TRUE(t.ok()) << src;
        EXPECT_EQ((*t)->takes_content_parts(), parts) << src;
    }
}

TEST(ChatTemplate, EmbeddedModelTemplateMatchesBuiltin) {
    const nlohmann::json cfg =
        nlohmann::json::parse(read_file(std::string(PENSTOCK_ASSETS_DIR) + "/tiny-deepseek-v3/tokenizer_config.json"));
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

Result<std::string> render_src(const std::string& src, ojson kwargs = ojson::object()) {
    Result<std::shared_ptr<const ChatTemplate>> t = ChatTemplate::parse(src);
    if (!t.ok()) return t.status();
    RenderOptions o;
    o.kwargs = std::move(kwargs);
    return (*t)->render(ojson::array(), o);
}

TEST(ChatTemplate, ToolsAreNoneWhenNotGivenAndKwargsOverride) {
    EXPECT_EQ(*render_src("{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }}"), "True True True");
    EXPECT_EQ(*render_src("{{ add_generation_prompt }} {{ enable_thinking }}",
                          {{"add_generation_prompt", false}, {"enable_thinking", true}}),
              "False True");
}

TEST(ChatTemplate, ErrorsNameTheTemplateLine) {
    Result<std::string> r = render_src("a\nb\n{% if x %}\n{% endfor %}");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("line 4"), std::string::npos) << r.status().message();
    r = render_src("one\n{{ x.y }}");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("'x' is undefined"), std::string::npos) << r.status().message();
    r = render_src("{{ raise_exception('Only user and assistant roles are supported!') }}");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("Only user and assistant roles are supported!"), std::string::npos);
    EXPECT_FALSE(render_src("{% unknowntag %}").ok());
    EXPECT_FALSE(render_src("{% break %}").ok());
    EXPECT_FALSE(render_src("{{ 'unterminated }}").ok());
    EXPECT_FALSE(render_src("{% for x in y %}").ok());
    EXPECT_FALSE(render_src("{{ 1 / 0 }}").ok());
}

TEST(ChatTemplate, LimitsStopRunawayRenders) {
    // Output cap: 100000 * 1000 bytes is over kMaxOutputBytes.
    Result<std::string> r = render_src("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("output exceeded"), std::string::npos) << r.status().message();
    // Step cap: nested loops of 10^10 iterations.
    r = render_src("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("steps"), std::string::npos) << r.status().message();
    // range() length cap (jinja2's sandbox MAX_RANGE).
    EXPECT_FALSE(render_src("{{ range(1000000) | length }}").ok());
    // Unbounded macro recursion.
    r = render_src("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("nested deeper"), std::string::npos) << r.status().message();
    // Deep nesting is refused at parse time, not by a stack overflow.
    EXPECT_FALSE(render_src("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").ok());
    EXPECT_FALSE(render_src(std::string(300 * 11, ' ')
                                .replace(0, 0,
                                         [] {
                                             std::string s;
                                             for (int k = 0; k < 300; ++k) s += "{% if 1 %}";
                                             return s;
                                         }()))
                     .ok());
}

TEST(ChatTemplate, ValuesHaveReferenceSemantics) {
    // Only `name.attr` may be assigned (jinja2), and containers are shared, not copied.
    EXPECT_FALSE(render_src("{% set ns = namespace(a=1) %}{% set d = {'a': ns} %}{% set d.a.k = 1 %}").ok());
    EXPECT_EQ(*render_src("{% set ns = namespace(n=0) %}{% set alias = ns %}{% set alias.n = 5 %}{{ ns.n }}"), "5");
    EXPECT_EQ(*render_src("{% set a = {'k': 1} %}{% set ns = namespace(d=a) %}{{ ns.d is sameas a }}"), "True");
}

}  // namespace
}  // namespace penstock::server
