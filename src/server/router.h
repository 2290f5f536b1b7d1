// `penstock router`: the front of a disaggregated deployment (SPEC §5). Each inference request (/generate,
// /v1/completions, /v1/chat/completions) gets a fresh bootstrap_room and goes to one prefill server and one decode
// server (round robin over each list) with the same room; the prefill server is told the decode server
// (bootstrap_host / bootstrap_port) and answers with the first token, which the router drops; the decode server's
// response, streamed or not, goes back to the client byte for byte. A prefill failure aborts the decode request
// (/generate: by rid) so the client gets the error at once. A checker thread reads every server's /health each second
// and the selection skips servers that are down (503 when no prefill or no decode server is up); GET /health is 200
// while one of each is up. GET /get_server_info lists the servers and their own reports, /v1/models is the first
// decode server's. One thread per connection, one request per connection.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace penstock::server {

struct RouterArgs {
    std::vector<std::string> prefill;  // http://host:port of each prefill server
    std::vector<std::string> decode;   // http://host:port of each decode server
    std::string host = "127.0.0.1";
    int port = 30000;
    double request_timeout_s = 600;  // one proxied request, end to end
    int64_t max_body_bytes = 64 << 20;
    int64_t max_connections = 1024;
};

void add_router_options(CLI::App* cmd, RouterArgs* args);

// Serves until SIGTERM / SIGINT. Start-up failures (bad URL, port taken) return a Status.
[[nodiscard]] Status run_router(const RouterArgs& args);

}  // namespace penstock::server
