// The server's tokenizer start-up (load_serve_tokenizer, what `penstock serve` calls) on a Kimi tiktoken checkpoint
// directory (tiktoken.model, no tokenizer.json): it loads, the tokenizer_config.json chat template parses, and a chat
// request renders and encodes with the template's special tokens as single ids.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/api.h"
#include "server/chat_template.h"
#include "server/serve_internal.h"

namespace penstock::server {
namespace {

const std::string kKimiDir = std::string(PENSTOCK_TEST_DATA_DIR) + "/tokenizer/tiktoken_kimi";

TEST(ServeTokenizer, LoadsKimiTiktokenDirectory) {
    ServeArgs args;
    args.model = kKimiDir;
    auto tok = load_serve_tokenizer(args);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    ASSERT_NE(*tok, nullptr);
    const engine::Tokenizer& t = **tok;
    EXPECT_TRUE(t.config().eos_id.has_value());
    auto tmpl = ChatTemplate::parse(t.config().chat_template);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();

    ServerConfig config;
    const ParseContext ctx{.tokenizer = &t,
                           .config = &config,
                           .model_name = "kimi",
                           .max_context_len = 4096,
                           .vocab_size = t.vocab_size(),
                           .chat_template = tmpl->get(),
                           .tool_format = ToolCallFormat::kNone,
                           .reasoning = {}};
    ParseResult r = parse_job(ApiKind::kChat, R"({"messages": [{"role": "user", "content": "你好 Kimi"}]})", ctx);
    ASSERT_TRUE(r.job) << r.error.message;
    const std::vector<int32_t>& ids = r.job->prompts.at(0).ids;
    const std::vector<int32_t> want =
        *t.encode("<|im_user|>user<|im_middle|>你好 Kimi<|im_end|><|im_assistant|>assistant<|im_middle|>", false);
    EXPECT_EQ(ids, want);
    EXPECT_EQ(ids.front(), *t.token_to_id("<|im_user|>"));
    EXPECT_EQ(t.decode(ids, /*skip_special_tokens=*/true), "user你好 Kimiassistant");

    // --skip-tokenizer-init still loads nothing.
    args.server.skip_tokenizer_init = true;
    auto none = load_serve_tokenizer(args);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(*none, nullptr);
}

TEST(ServeTokenizer, DirectoryWithoutTokenizerSaysSo) {
    ServeArgs args;
    args.model = std::string(PENSTOCK_TEST_DATA_DIR) + "/tokenizer";  // files, but neither tokenizer file name
    auto tok = load_serve_tokenizer(args);
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("neither tokenizer.json nor tiktoken.model"), std::string::npos)
        << tok.status().to_string();
    EXPECT_NE(tok.status().message().find("--skip-tokenizer-init"), std::string::npos) << tok.status().to_string();
}

}  // namespace
}  // namespace penstock::server
