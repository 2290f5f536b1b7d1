// A blocking HTTP/1.1 client for the load generator (Boost.Beast over FdStream): one request per connection,
// POST a JSON body, read an SSE stream (or a whole body) and time every event. Thread-compatible: one call per
// thread, no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace penstock::bench {

struct Endpoint {
    std::string host = "127.0.0.1";
    int port = 30000;
};

// "http://host:port" (path ignored). False with `error` set for anything else.
bool parse_base_url(const std::string& url, Endpoint* out, std::string* error);

struct StreamTiming {
    bool ok = false;
    std::string error;  // "" when ok
    int http_status = 0;
    int64_t prompt_tokens = 0;  // as the server reports them
    int64_t output_tokens = 0;
    double ttft_s = 0;          // request sent -> first event carrying a token
    double e2e_s = 0;           // request sent -> stream done
    std::vector<double> itl_s;  // gaps between consecutive token-carrying events
    std::string finish_reason;
};

// POSTs `body` to `path` and reads an SGLang /generate SSE stream ("data: {...}" with meta_info.completion_tokens,
// then "data: [DONE]"). The whole exchange must finish within timeout_s.
StreamTiming stream_generate(const Endpoint& ep, const std::string& path, const std::string& body, double timeout_s);

// A plain GET; returns the body, or "" with `status` 0 on a transport failure.
std::string http_get(const Endpoint& ep, const std::string& path, double timeout_s, int* status);

}  // namespace penstock::bench
