// Bench HTTP client: Beast request serializer and response parser (chunk callback for SSE) over FdStream.
#include "bench/client.h"

#include <unistd.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "server/disagg_bootstrap.h"
#include "server/fd_stream.h"

namespace penstock::bench {

namespace http = boost::beast::http;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

bool parse_base_url(const std::string& url, Endpoint* out, std::string* error) {
    const std::string scheme = "http://";
    if (url.rfind(scheme, 0) != 0) {
        *error = "--base-url must start with http:// (got '" + url + "')";
        return false;
    }
    std::string rest = url.substr(scheme.size());
    rest = rest.substr(0, rest.find('/'));
    const size_t colon = rest.rfind(':');
    out->host = colon == std::string::npos ? rest : rest.substr(0, colon);
    out->port = 80;
    if (colon != std::string::npos) {
        try {
            out->port = std::stoi(rest.substr(colon + 1));
        } catch (const std::exception&) {
            *error = "bad port in --base-url '" + url + "'";
            return false;
        }
    }
    if (out->host.empty() || out->port <= 0 || out->port > 65535) {
        *error = "bad --base-url '" + url + "'";
        return false;
    }
    return true;
}

namespace {

struct Connection {
    int fd = -1;
    ~Connection() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

StreamTiming stream_generate(const Endpoint& ep, const std::string& path, const std::string& body, double timeout_s) {
    StreamTiming t;
    Connection conn;
    conn.fd = server::connect_tcp(ep.host, ep.port, timeout_s, &t.error);
    if (conn.fd < 0) return t;
    server::FdStream s(conn.fd);
    s.set_timeout(timeout_s);
    http::request<http::string_body> req{http::verb::post, path, 11};
    req.set(http::field::host, ep.host);
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    req.keep_alive(false);
    req.body() = body;
    req.prepare_payload();
    boost::system::error_code ec;
    const Clock::time_point t0 = Clock::now();
    http::write(s, req, ec);
    if (ec) {
        t.error = "write: " + ec.message();
        return t;
    }
    boost::beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    std::string pending;
    bool done = false;
    Clock::time_point last_token{};
    const auto on_event = [&](std::string_view data) {
        if (data == "[DONE]") {
            done = true;
            return;
        }
        const json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
        if (!j.is_object()) return;
        if (j.contains("error")) {
            t.error = j["error"].value("message", std::string("error event"));
            return;
        }
        const json meta = j.value("meta_info", json::object());
        const int64_t n = meta.value("completion_tokens", int64_t{0});
        t.prompt_tokens = meta.value("prompt_tokens", t.prompt_tokens);
        if (n > t.output_tokens) {
            const Clock::time_point now = Clock::now();
            if (t.output_tokens == 0) {
                t.ttft_s = std::chrono::duration<double>(now - t0).count();
            } else {
                t.itl_s.push_back(std::chrono::duration<double>(now - last_token).count());
            }
            last_token = now;
            t.output_tokens = n;
        }
        if (meta.contains("finish_reason") && meta["finish_reason"].is_object()) {
            t.finish_reason = meta["finish_reason"].value("type", std::string());
        }
    };
    auto on_chunk = [&](uint64_t, std::string_view data, boost::system::error_code&) -> size_t {
        pending.append(data.data(), data.size());
        size_t end = 0;
        while ((end = pending.find("\n\n")) != std::string::npos) {
            std::string_view ev(pending.data(), end);
            if (ev.rfind("data: ", 0) == 0) on_event(ev.substr(6));
            pending.erase(0, end + 2);
        }
        return data.size();
    };
    parser.on_chunk_body(on_chunk);
    http::read_header(s, buf, parser, ec);
    if (!ec) t.http_status = static_cast<int>(parser.get().result_int());
    while (!ec && !parser.is_done()) http::read_some(s, buf, parser, ec);
    t.e2e_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (ec && ec != http::error::end_of_stream) {
        if (t.error.empty()) t.error = "read: " + ec.message();
        return t;
    }
    if (t.http_status != 200) {
        const std::string& b = parser.get().body();
        t.error = "HTTP " + std::to_string(t.http_status) + ": " + b.substr(0, 300);
        return t;
    }
    if (t.error.empty() && !done) t.error = "stream ended without [DONE]";
    if (t.error.empty() && t.finish_reason != "length" && t.finish_reason != "stop") {
        t.error = "finish_reason " + t.finish_reason;
    }
    t.ok = t.error.empty();
    return t;
}

std::string http_get(const Endpoint& ep, const std::string& path, double timeout_s, int* status) {
    return server::http_get(ep.host, ep.port, path, timeout_s, status);
}

}  // namespace penstock::bench
