// Server: `penstock serve`'s HTTP front end (Boost.Beast parser/serializer, Boost.Asio acceptor). One acceptor
// thread; one thread per open connection (bounded by max_connections), reading with FdStream deadlines; inference
// handlers submit to the Engine and wait on their RequestHandle, polling the socket so that a client that goes away
// aborts its request (pages freed by the engine thread). Contract (threads, limits, drain): docs/design/server.md.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "server/api.h"
#include "server/config.h"
#include "server/disagg_bootstrap.h"

namespace penstock::server {

class FdStream;

class Server final {
public:
    // `engine` (started) must outlive the server. `info_json` is a JSON object merged into /get_server_info (model
    // path, parallel sizes, ineffective options: whatever the caller knows).
    // `bootstrap` (a prefill server in a disaggregated deployment; else null) learns each request's decode server.
    Server(engine::Engine* engine, ServerConfig config, std::string info_json,
           std::shared_ptr<DisaggBootstrap> bootstrap = nullptr);
    ~Server();

    // Binds and listens; returns the bound port. InvalidArgument for a bad host, Unavailable when the port is taken.
    [[nodiscard]] Result<int> listen();
    // Serves until a drain completes: returns after request_drain() once in-flight requests finish (or the drain
    // timeout passes, which aborts the rest), every connection is closed and the engine is stopped.
    void run();
    // Thread-safe: readiness turns 503 at once, new inference requests get 503, in-flight ones continue.
    void request_drain();

private:
    // The engine loop's heartbeat is older than --watchdog-timeout (a hung step, or a pipeline rank that stopped
    // answering): waiting requests are answered 503 instead of hanging (RELIABILITY T13).
    bool engine_stalled() const;
    // A waiting request when the engine stalled: abort it (queued; the engine may never take it) and answer 503, as a
    // whole response or, once a stream has begun, as its error frame and end.
    bool answer_stalled(FdStream& s, bool keep, bool stream_started, const std::vector<int64_t>& request_ids);
    void serve_connection(int fd);
    // Handles one request; returns whether the connection may be kept alive.
    template <class Request>
    bool handle(const Request& req, FdStream& s);
    template <class Request>
    bool run_job(ApiKind kind, const Request& req, FdStream& s);
    // A job of several choices (OpenAI n > 1 or a prompt batch): one engine request each, answered together (one
    // body with every choice, or one stream whose chunks carry their choice's index).
    bool run_choices(const Job& job, const std::string& id, FdStream& s, bool keep_alive);
    bool health_generate(FdStream& s, bool keep_alive);
    std::string server_info() const;
    std::string metrics_text() const;
    void count_rejection(const std::string& reason);
    bool authorized(std::string_view header) const;

    engine::Engine* engine_;
    std::shared_ptr<DisaggBootstrap> bootstrap_;
    ServerConfig config_;
    std::string info_json_;
    ParseContext parse_ctx_;
    std::shared_ptr<const ChatTemplate> chat_template_;
    std::string chat_template_source_;  // "tokenizer_config" or "builtin-deepseek (<why>)"
    boost::asio::io_context ioc_;
    std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;

    std::atomic<bool> draining_{false};
    std::chrono::steady_clock::time_point drain_deadline_{};
    std::atomic<int64_t> in_flight_{0};
    std::atomic<int64_t> next_rid_{0};
    mutable std::mutex mu_;
    std::set<int> open_fds_;
    std::map<std::string, int64_t> rejections_;
    std::atomic<int64_t> n_connections_{0};
};

}  // namespace penstock::server
