// ServerConfig: every transport, validation and lifecycle limit of `penstock serve`, each a named setting with a
// default (SGLang flag names where SGLang has the concept); all of them are reported by /get_server_info.
#pragma once

#include <cstdint>
#include <string>

namespace penstock::server {

struct ServerConfig {
    std::string host = "127.0.0.1";  // --host: loopback unless the operator opens it up
    int port = 30000;                // --port (0: an ephemeral port, printed at start)
    std::string api_key;             // --api-key: when set, inference and admin routes need "Authorization: Bearer"
    std::string served_model_name;   // --served-model-name (default: the model directory's name)
    bool skip_tokenizer_init = false;

    // Transport (Beast parser limits and per-phase deadlines).
    int64_t max_body_bytes = 4 << 20;     // --max-body-bytes: larger bodies get 413
    int64_t max_header_bytes = 16 << 10;  // --max-header-bytes: larger header blocks get 431
    double header_timeout_s = 10;         // --header-timeout-s: request line + headers must arrive within (408)
    double body_timeout_s = 60;           // --body-timeout-s: the body must arrive within (408)
    double write_timeout_s = 60;          // --write-timeout-s: a response write must finish within
    double keep_alive_timeout_s = 30;     // --keep-alive-timeout-s: idle time before a kept-alive socket closes
    int64_t max_connections = 512;        // --max-connections: more open sockets get 503 and are closed
    int64_t max_json_depth = 32;          // --max-json-depth: deeper nesting is refused (400) before parsing

    // Request validation.
    int64_t max_new_tokens_limit = 0;      // --max-new-tokens-limit: 0 = the model's context length
    int64_t default_max_new_tokens = 128;  // /generate default (the OpenAI routes default to 16, as OpenAI does)
    int64_t max_stop_strings = 16;         // --max-stop-strings
    int64_t max_stop_string_bytes = 256;   // --max-stop-string-bytes
    int64_t max_stop_token_ids = 64;
    int64_t max_messages = 256;  // chat messages per request
    int64_t max_tools = 128;     // --max-tools: chat, function tools per request
    // --tool-call-parser: how tool calls are read back out of chat outputs (tool_parser.h names); "auto" takes the
    // format the chat template writes, "none" refuses requests with tools.
    std::string tool_call_parser = "auto";
    // --reasoning-parser: splits a thinking model's reasoning out of chat outputs (reasoning_parser.h names).
    std::string reasoning_parser = "none";
    int64_t max_choices = 64;  // --max-choices: OpenAI routes, prompts x n per request (each is one engine request)

    // Lifecycle.
    double request_timeout_s = 600;  // --request-timeout-s: per-request deadline in the engine (0 = none)
    double retry_after_s = 1;        // Retry-After of a 429
    double drain_timeout_s = 30;     // --drain-timeout-s: SIGTERM waits this long for in-flight requests
    double watchdog_timeout_s = 30;  // --watchdog-timeout: /health is 503 when the engine loop is older than this
    double health_generate_timeout_s = 20;
};

}  // namespace penstock::server
