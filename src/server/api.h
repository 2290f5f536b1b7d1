// The request/response shapes of the HTTP API: SGLang's native /generate and OpenAI's /v1/completions and
// /v1/chat/completions. parse_job turns a JSON body into an engine request (validating every field with bounded
// work: no allocation proportional to an attacker-chosen integer); ResponseWriter renders whole responses and SSE
// events. Pure functions of their inputs (no sockets), so they are unit-testable. Field policy: docs/design/server.md.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "engine/tokenizer.h"
#include "server/chat_template.h"
#include "server/config.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

namespace penstock::server {

enum class ApiKind : uint8_t { kGenerate, kCompletions, kChat };

// An HTTP error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
    int http_status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // the offending field ("" = none)
};
std::string error_body(const ApiError& e);

// One prompt of a job: its ids and, for completions with echo, its text.
struct JobPrompt {
    std::vector<int32_t> ids;
    std::string echo_text;
};

struct Job {
    ApiKind kind = ApiKind::kGenerate;
    // The first choice's request (the prompt of prompts[0]); every choice shares its parameters.
    engine::GenerateRequest request;
    // OpenAI routes: the prompts (completions may batch several; one otherwise) and n choices per prompt. Choice i is
    // prompts[i / n] with its own seed (the request's seed + i when one was given).
    std::vector<JobPrompt> prompts;
    int64_t n = 1;
    int64_t n_choices() const { return static_cast<int64_t>(prompts.size()) * n; }
    bool batch = false;  // /generate: the input was a list (the answer is a list, even of one)
    // Answered as several choices (server run_choices): n > 1, several prompts, or a /generate list input.
    bool multi() const { return n_choices() > 1 || batch; }
    engine::GenerateRequest choice_request(int64_t i) const;
    bool stream = false;
    bool include_usage = false;     // stream_options.include_usage
    bool return_text = true;        // a tokenizer is loaded
    bool text_in_logprobs = false;  // /generate: return_text_in_logprobs (token texts in the logprob entries)
    // /v1/completions echo: the prompt's text leads the completion (and its tokens the logprobs); with max_tokens 0
    // (score_only) the completion is the prompt alone, the one token the engine computed is not returned.
    bool echo = false;
    bool score_only = false;
    std::string model;
    // Chat with tools (and tool_choice not "none"): the request's tools and the format whose calls are parsed out of
    // the output into message.tool_calls (kNone: none are).
    nlohmann::json tools;
    ToolCallFormat tool_format = ToolCallFormat::kNone;
    // Chat with a reasoning parser (--reasoning-parser) and separate_reasoning (default true): the output's reasoning
    // goes to message.reasoning_content.
    ReasoningFormat reasoning;
    // /generate, disaggregation (SGLang's field names): the decode server a prefill server sends the room's KV to.
    std::string bootstrap_host;
    int64_t bootstrap_port = 0;
};

struct ParseContext {
    const engine::Tokenizer* tokenizer = nullptr;  // null: --skip-tokenizer-init (ids in and out)
    const ServerConfig* config = nullptr;
    std::string model_name;
    int64_t max_context_len = 0;
    int64_t vocab_size = 0;
    // tokenizer_config.json's chat template when it parsed (ChatTemplate subset); null: the builtin template.
    const ChatTemplate* chat_template = nullptr;
    // The format of tool calls in this model's chat outputs (--tool-call-parser); kNone: requests with tools are
    // refused.
    ToolCallFormat tool_format = ToolCallFormat::kNone;
    ReasoningFormat reasoning;  // --reasoning-parser (off: none)
};

// The job, or the error to answer with (400 for malformed JSON or a bad field).
struct ParseResult {
    std::optional<Job> job;
    ApiError error;
};
ParseResult parse_job(ApiKind kind, std::string_view body, const ParseContext& ctx);

// OpenAI chat messages rendered by `t`. Templates disagree on shapes OpenAI clients send, so up to four forms are
// tried and the first that renders wins (the error is the first form's): content-part lists joined into one string
// unless the template loops over contents (takes_content_parts), tool-call arguments as objects (transformers'
// convention) else as the JSON strings sent, null content as is else as "".
Result<std::string> render_openai_chat(const ChatTemplate& t, const nlohmann::ordered_json& messages,
                                       const RenderOptions& o);

// Nesting depth of a JSON text ('[' / '{' outside strings), counted without parsing; stops counting at limit + 1.
int64_t json_depth(std::string_view body, int64_t limit);

// The builtin chat template (DeepSeek style, the embedded model's tokenizer_config template): BOS, then per message
// user "<｜User｜>c", assistant "<｜Assistant｜>c" + EOS, other roles c; then "<｜Assistant｜>".
std::string render_chat(const std::vector<ChatMessage>& messages, const std::string& bos, const std::string& eos);

// Renders one job's outputs as it progresses.
class ResponseWriter final {
public:
    // Choice `index` of `job` (OpenAI's choices[].index).
    ResponseWriter(const Job& job, std::string id, int64_t created, int64_t index = 0);
    // Folds an engine event into the accumulated output.
    void add(const engine::RequestOutput& ev);
    // The whole (non-streaming) response body once finished.
    std::string final_body() const;
    // SSE "data: {...}\n\n" frames for the last event added (may be several: OpenAI's role chunk, usage chunk);
    // finished events end with "data: [DONE]\n\n".
    // With several choices the server ends the stream itself (multi_choice_stream_end): the frames then never hold
    // the usage chunk or [DONE].
    std::string sse_frames(const engine::RequestOutput& ev);
    const std::string& id() const { return id_; }
    int64_t created() const { return created_; }
    const engine::RequestOutput& last() const { return last_; }
    int64_t n_out() const { return static_cast<int64_t>(ids_.size()); }

private:
    std::string finish_reason_openai() const;
    // Chat with tools: OpenAI's tool_calls entries (ids "call_..." unless the model named them).
    nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls) const;
    bool logprobs_on() const { return job_.request.params.return_logprob; }
    // Completions with echo: the prompt's scored tokens, then `lps`.
    std::vector<engine::OutputLogprob> echoed(const std::vector<engine::OutputLogprob>& lps) const;

    const Job& job_;
    std::string id_;
    int64_t created_;
    int64_t index_;
    const std::string& echo_text_;
    std::vector<int32_t> ids_;
    std::string text_;
    std::vector<engine::OutputLogprob> logprobs_;         // per output token, with return_logprob
    int64_t streamed_text_bytes_ = 0;                     // completions stream: text_offset of the next token
    std::vector<engine::OutputLogprob> prompt_logprobs_;  // with logprob_start_len >= 0 (first token's event)
    bool echo_sent_ = false;                              // completions stream: the prompt went out
    engine::RequestOutput last_;
    bool sent_role_ = false;
    std::optional<ToolCallStream> tool_stream_;        // chat stream with tools: content held back from tool markup
    std::optional<ReasoningStream> reasoning_stream_;  // chat stream with a reasoning parser
};

// Several choices: the whole body (every writer's choice, usage summed: each prompt's tokens once, every choice's
// completion tokens), and a stream's end (the usage chunk when asked, then [DONE]).
std::string multi_choice_body(const std::vector<ResponseWriter>& writers, const Job& job);
std::string multi_choice_stream_end(const std::vector<ResponseWriter>& writers, const Job& job);

}  // namespace penstock::server
