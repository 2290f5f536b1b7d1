// Server: accept loop, per-connection threads, routing, inference handlers, drain.
#include "server/server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/logging.h"
#include "server/fd_stream.h"

namespace penstock::server {

namespace http = boost::beast::http;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using HttpRequest = http::request<http::string_body>;

std::string render_metrics(const engine::EngineMetrics& m, const std::map<std::string, int64_t>& http_rejections,
                           int64_t connections, bool ready);

namespace {

struct Reply {
    int status = 200;
    std::string body;
    std::string content_type = "application/json";
    std::string retry_after;  // "" = no header
};

bool write_reply(FdStream& s, const Reply& r, bool keep_alive, double timeout_s) {
    http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
    res.set(http::field::server, "penstock");
    res.set(http::field::content_type, r.content_type);
    if (!r.retry_after.empty()) res.set(http::field::retry_after, r.retry_after);
    res.keep_alive(keep_alive);
    res.body() = r.body;
    res.prepare_payload();
    s.set_timeout(timeout_s);
    boost::system::error_code ec;
    http::write(s, res, ec);
    return !ec && keep_alive;
}

Reply json_reply(std::string body) {
    return Reply{.status = 200, .body = std::move(body), .content_type = "application/json", .retry_after = ""};
}

Reply error_reply(int status, std::string message, std::string type = "invalid_request_error", std::string param = "") {
    return Reply{
        .status = status,
        .body = error_body(
            {.http_status = status, .message = std::move(message), .type = std::move(type), .param = std::move(param)}),
        .content_type = "application/json",
        .retry_after = ""};
}

Reply status_reply(const Status& st, double retry_after_s) {
    switch (st.code()) {
        case StatusCode::kResourceExhausted: {
            Reply r = error_reply(429, st.message(), "rate_limit_error");
            r.retry_after = std::to_string(static_cast<int64_t>(std::ceil(std::max(retry_after_s, 1.0))));
            return r;
        }
        case StatusCode::kUnavailable:
            return error_reply(503, st.message(), "unavailable");
        case StatusCode::kDeadlineExceeded:
            return error_reply(504, st.message(), "timeout");
        case StatusCode::kInvalidArgument:
        case StatusCode::kOutOfRange:
        case StatusCode::kNotFound:
        case StatusCode::kFailedPrecondition:
            return error_reply(400, st.message());
        case StatusCode::kCancelled:
        case StatusCode::kAborted:
            return error_reply(499, st.message(), "aborted");
        default:
            return error_reply(500, st.message(), "internal_error");
    }
}

// Writes one HTTP/1.1 chunk.
bool write_chunk(FdStream& s, const std::string& data, double timeout_s) {
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    s.set_timeout(timeout_s);
    boost::system::error_code ec;
    s.write_all(std::string(size) + data + "\r\n", ec);
    return !ec;
}

bool wait_readable(int fd, double timeout_s) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    return ::poll(&p, 1, static_cast<int>(timeout_s * 1000)) > 0;
}

}  // namespace

Server::Server(engine::Engine* engine, ServerConfig config, std::string info_json,
               std::shared_ptr<DisaggBootstrap> bootstrap)
    : engine_(engine), bootstrap_(std::move(bootstrap)), config_(std::move(config)), info_json_(std::move(info_json)) {
    parse_ctx_ = ParseContext{.tokenizer = engine_->tokenizer(),
                              .config = &config_,
                              .model_name = config_.served_model_name,
                              .max_context_len = engine_->scheduler_config().max_context_len,
                              .vocab_size = engine_->model_config().vocab_size,
                              .chat_template = nullptr,
                              .tool_format = ToolCallFormat::kNone,
                              .reasoning = {}};
    chat_template_source_ = "builtin-deepseek";
    const engine::Tokenizer* tok = engine_->tokenizer();
    if (tok != nullptr && !tok->config().chat_template.empty()) {
        Result<std::shared_ptr<const ChatTemplate>> t = ChatTemplate::parse(tok->config().chat_template);
        if (t.ok()) {
            chat_template_ = std::move(t).value();
            parse_ctx_.chat_template = chat_template_.get();
            chat_template_source_ = tok->config().chat_template_source;
        } else {
            chat_template_source_ =
                "builtin-deepseek (tokenizer_config template not used: " + t.status().message() + ")";
            PENSTOCK_LOG_WARN("{}", chat_template_source_);
        }
    }
    Result<ReasoningFormat> reasoning = reasoning_format_from_name(config_.reasoning_parser);
    PENSTOCK_CHECK(reasoning.ok()) << reasoning.status().to_string();  // the command line checked it
    parse_ctx_.reasoning = *reasoning;
    // The tool-call format: named, or (auto) the one the template in use writes; the builtin template writes none.
    if (config_.tool_call_parser != "auto") {
        Result<ToolCallFormat> f = tool_call_format_from_name(config_.tool_call_parser);
        PENSTOCK_CHECK(f.ok()) << f.status().to_string();  // the command line checked it
        parse_ctx_.tool_format = *f;
    } else if (chat_template_ != nullptr) {
        parse_ctx_.tool_format = detect_tool_call_format(tok->config().chat_template);
    }
}

Server::~Server() = default;

Result<int> Server::listen() {
    boost::system::error_code ec;
    const auto addr = boost::asio::ip::make_address(config_.host, ec);
    if (ec) return invalid_argument("--host '" + config_.host + "' is not an IP address");
    if (config_.port < 0 || config_.port > 65535) return invalid_argument("--port must be in [0, 65535]");
    auto acc = std::make_unique<boost::asio::ip::tcp::acceptor>(ioc_);
    const boost::asio::ip::tcp::endpoint ep(addr, static_cast<uint16_t>(config_.port));
    acc->open(ep.protocol(), ec);
    if (!ec) acc->set_option(boost::asio::socket_base::reuse_address(true), ec);
    if (!ec) acc->bind(ep, ec);
    if (!ec) acc->listen(boost::asio::socket_base::max_listen_connections, ec);
    if (!ec) acc->non_blocking(true, ec);
    if (ec) {
        return Status(StatusCode::kUnavailable,
                      "cannot listen on " + config_.host + ":" + std::to_string(config_.port) + ": " + ec.message());
    }
    const int port = acc->local_endpoint().port();
    config_.port = port;  // the bound port (--port 0 picks one), as /get_server_info reports it
    acceptor_ = std::move(acc);
    return port;
}

void Server::request_drain() {
    if (draining_.exchange(true)) return;
    {
        std::lock_guard<std::mutex> lock(mu_);
        drain_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(config_.drain_timeout_s));
    }
    engine_->stop_accepting();
    PENSTOCK_LOG_WARN("drain: readiness is 503; waiting up to {} s for {} in-flight request(s)",
                      config_.drain_timeout_s, in_flight_.load());
}

void Server::run() {
    const int lfd = acceptor_->native_handle();
    while (true) {
        if (draining_) {
            Clock::time_point deadline;
            {
                std::lock_guard<std::mutex> lock(mu_);
                deadline = drain_deadline_;
            }
            if ((in_flight_ == 0 && engine_->n_live() == 0) || Clock::now() >= deadline) break;
        }
        if (!wait_readable(lfd, 0.05)) continue;
        boost::system::error_code ec;
        boost::asio::ip::tcp::socket sock = acceptor_->accept(ec);
        if (ec) continue;
        const int fd = sock.release(ec);
        if (ec) continue;
        if (n_connections_ >= config_.max_connections) {
            count_rejection("too_many_connections");
            ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
            FdStream s(fd);
            write_reply(s, error_reply(503, "too many open connections", "unavailable"), false, 0.2);
            ::close(fd);
            continue;
        }
        ++n_connections_;
        {
            std::lock_guard<std::mutex> lock(mu_);
            open_fds_.insert(fd);
        }
        std::thread([this, fd] { serve_connection(fd); }).detach();
    }
    acceptor_->close();
    const int64_t left = engine_->n_live();
    if (left > 0) PENSTOCK_LOG_WARN("drain timeout: aborting {} request(s)", left);
    engine_->stop();  // aborts whatever is left; handlers see the final events
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);  // wakes idle keep-alive readers
    }
    for (int i = 0; i < 500 && n_connections_ > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void Server::count_rejection(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    ++rejections_[reason];
}

bool Server::authorized(std::string_view header) const {
    if (config_.api_key.empty()) return true;
    const std::string want = "Bearer " + config_.api_key;
    if (header.size() != want.size()) return false;
    unsigned diff = 0;
    for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned>(header[i] ^ want[i]);
    return diff == 0;
}

void Server::serve_connection(int fd) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK);  // FdStream polls with deadlines
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    FdStream s(fd);
    boost::beast::flat_buffer buf;
    bool keep = true;
    bool first = true;
    while (keep) {
        if (buf.size() == 0 && !wait_readable(fd, first ? config_.header_timeout_s : config_.keep_alive_timeout_s)) {
            if (first) write_reply(s, error_reply(408, "request header timeout"), false, 1.0);
            break;
        }
        first = false;
        http::request_parser<http::string_body> parser;
        parser.header_limit(static_cast<uint32_t>(config_.max_header_bytes));
        parser.body_limit(static_cast<uint64_t>(config_.max_body_bytes));
        boost::system::error_code ec;
        s.set_timeout(config_.header_timeout_s);
        http::read_header(s, buf, parser, ec);
        if (!ec && parser.get()[http::field::expect] == "100-continue") {
            s.set_timeout(config_.write_timeout_s);
            s.write_all("HTTP/1.1 100 Continue\r\n\r\n", ec);
        }
        if (!ec) {
            s.set_timeout(config_.body_timeout_s);
            http::read(s, buf, parser, ec);
        }
        if (ec) {
            if (ec == http::error::end_of_stream || ec == boost::asio::error::eof ||
                ec == boost::asio::error::connection_reset) {
                break;
            }
            Reply r;
            if (ec == boost::asio::error::timed_out) {
                count_rejection("timeout");
                r = error_reply(408, "request timeout");
            } else if (ec == http::error::header_limit) {
                count_rejection("header_too_large");
                r = error_reply(431, "request header fields too large");
            } else if (ec == http::error::body_limit) {
                count_rejection("body_too_large");
                r = error_reply(413, "request body larger than " + std::to_string(config_.max_body_bytes) + " bytes");
            } else {
                count_rejection("bad_http");
                r = error_reply(400, "malformed HTTP request");
            }
            write_reply(s, r, false, 1.0);
            break;
        }
        keep = handle(parser.get(), s) && !draining_;
    }
    {
        std::lock_guard<std::mutex> lock(mu_);
        open_fds_.erase(fd);
    }
    ::close(fd);
    --n_connections_;
}

template <class Request>
bool Server::handle(const Request& req, FdStream& s) {
    const bool keep = req.keep_alive();
    std::string_view target(req.target().data(), req.target().size());
    target = target.substr(0, target.find('?'));
    const auto method = req.method();
    const auto reply = [&](const Reply& r) { return write_reply(s, r, keep, config_.write_timeout_s); };
    const bool get = method == http::verb::get || method == http::verb::head;
    const bool post = method == http::verb::post;
    if (target == "/health" || target == "/health/readiness") {
        if (!get) return reply(error_reply(405, "use GET"));
        const double age = std::chrono::duration<double>(Clock::now() - engine_->last_heartbeat()).count();
        if (draining_)
            return reply({.status = 503, .body = "draining", .content_type = "text/plain", .retry_after = ""});
        if (age > config_.watchdog_timeout_s) {
            return reply({.status = 503,
                          .body = "engine loop stalled for " + std::to_string(age) + " s",
                          .content_type = "text/plain",
                          .retry_after = ""});
        }
        return reply({.status = 200, .body = "ok", .content_type = "text/plain", .retry_after = ""});
    }
    if (target == "/metrics") {
        return reply(
            {.status = 200, .body = metrics_text(), .content_type = "text/plain; version=0.0.4", .retry_after = ""});
    }
    const std::string_view auth(req[http::field::authorization].data(), req[http::field::authorization].size());
    if (!authorized(auth)) {
        count_rejection("unauthorized");
        return reply(error_reply(401, "missing or invalid API key", "authentication_error"));
    }
    if (target == "/generate") return post ? run_job(ApiKind::kGenerate, req, s) : reply(error_reply(405, "use POST"));
    if (target == "/v1/completions") {
        return post ? run_job(ApiKind::kCompletions, req, s) : reply(error_reply(405, "use POST"));
    }
    if (target == "/v1/chat/completions") {
        return post ? run_job(ApiKind::kChat, req, s) : reply(error_reply(405, "use POST"));
    }
    if (target == "/health_generate") return health_generate(s, keep);
    if (target == "/disagg/destination") {
        // The decode end's bootstrap: the KV destination of a room whose pages are reserved (404 until then).
        if (!get) return reply(error_reply(405, "use GET"));
        const std::string_view full(req.target().data(), req.target().size());
        const size_t q = full.find("?room=");
        uint64_t room = 0;
        std::string_view digits = q == std::string_view::npos ? std::string_view() : full.substr(q + 6);
        std::optional<bool> peer_lazy;
        if (const size_t amp = digits.find('&'); amp != std::string_view::npos) {
            const std::string_view rest = digits.substr(amp + 1);
            digits = digits.substr(0, amp);
            if (rest != "lazy=0" && rest != "lazy=1") return reply(error_reply(400, "lazy: 0 or 1", "", "lazy"));
            peer_lazy = rest == "lazy=1";
        }
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), room);
        if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
            return reply(error_reply(400, "room: a decimal room id is required", "", "room"));
        }
        const Result<std::vector<uint8_t>> d = engine_->destination(room, peer_lazy);
        if (!d.ok()) {
            return reply(error_reply(d.status().code() == StatusCode::kNotFound ? 404 : 409, d.status().message()));
        }
        return reply(json_reply(json{{"room", room}, {"destination", to_hex(*d)}}.dump()));
    }
    if (target == "/get_server_info" || target == "/server_info") return reply(json_reply(server_info()));
    if (target == "/v1/models") {
        json m = {{"object", "list"},
                  {"data",
                   {{{"id", config_.served_model_name},
                     {"object", "model"},
                     {"created", 0},
                     {"owned_by", "penstock"},
                     {"max_model_len", engine_->scheduler_config().max_context_len}}}}};
        return reply(json_reply(m.dump()));
    }
    if (target == "/abort_request") {
        if (!post) return reply(error_reply(405, "use POST"));
        const json j = json::parse(req.body(), nullptr, /*allow_exceptions=*/false);
        if (!j.is_object()) return reply(error_reply(400, "the body must be a JSON object"));
        auto rid = j.find("rid");
        if (rid == j.end() || !rid->is_string()) return reply(error_reply(400, "rid: a string is required", "", "rid"));
        const bool found = engine_->abort_rid(rid->get<std::string>(), engine::AbortReason::kUser);
        return reply(json_reply(json{{"success", found}}.dump()));
    }
    return reply(error_reply(404, "no route for " + std::string(target.substr(0, 128)), "not_found"));
}

namespace {

// The headers of an SSE response (chunked); false when the client is gone.
bool start_stream(FdStream& s, bool keep, double write_timeout_s) {
    s.set_timeout(write_timeout_s);
    boost::system::error_code ec;
    s.write_all(std::string("HTTP/1.1 200 OK\r\nServer: penstock\r\nContent-Type: text/event-stream\r\n"
                            "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n") +
                    (keep ? "" : "Connection: close\r\n") + "\r\n",
                ec);
    return !ec;
}

// A stream's error frame for a request that failed after its stream began ("" otherwise).
std::string error_frame(const engine::RequestOutput& ev) {
    if (!ev.finished || ev.error.ok()) return "";
    return "data: " +
           error_body({.http_status = status_reply(ev.error, 0).status,
                       .message = ev.error.message(),
                       .type = "server_error",
                       .param = ""}) +
           "\n\n";
}

}  // namespace

bool Server::engine_stalled() const {
    return std::chrono::duration<double>(Clock::now() - engine_->last_heartbeat()).count() > config_.watchdog_timeout_s;
}

bool Server::answer_stalled(FdStream& s, bool keep, bool stream_started, const std::vector<int64_t>& request_ids) {
    for (int64_t id : request_ids) engine_->abort(id, engine::AbortReason::kShutdown);
    const std::string message = "the engine has not advanced for more than --watchdog-timeout " +
                                std::to_string(config_.watchdog_timeout_s) + " s (a hung step or pipeline rank)";
    if (!stream_started) {
        return write_reply(s, error_reply(503, message, "unavailable"), keep, config_.write_timeout_s);
    }
    const std::string frames =
        "data: " + error_body({.http_status = 503, .message = message, .type = "unavailable", .param = ""}) +
        "\n\ndata: [DONE]\n\n";
    return write_chunk(s, frames, config_.write_timeout_s) && write_chunk(s, "", config_.write_timeout_s) && keep;
}

template <class Request>
bool Server::run_job(ApiKind kind, const Request& req, FdStream& s) {
    const bool keep = req.keep_alive();
    const auto reply = [&](const Reply& r) { return write_reply(s, r, keep, config_.write_timeout_s); };
    if (draining_) {
        count_rejection("draining");
        return reply(error_reply(503, "the server is shutting down", "unavailable"));
    }
    ParseResult pr = parse_job(kind, req.body(), parse_ctx_);
    if (!pr.job) {
        count_rejection("invalid_request");
        return reply(error_reply(pr.error.http_status, pr.error.message, pr.error.type, pr.error.param));
    }
    Job& job = *pr.job;
    if (job.request.bootstrap_room && bootstrap_ != nullptr) {
        if (job.bootstrap_host.empty() || job.bootstrap_port == 0) {
            count_rejection("invalid_request");
            return reply(error_reply(400,
                                     "bootstrap_room on a prefill server needs bootstrap_host and bootstrap_port "
                                     "(the decode server)",
                                     "invalid_request_error", "bootstrap_host"));
        }
        bootstrap_->add(*job.request.bootstrap_room, job.bootstrap_host, static_cast<int>(job.bootstrap_port));
    }
    const int64_t n = next_rid_++;
    std::string id = kind == ApiKind::kGenerate
                         ? (job.request.rid.empty() ? "req-" + std::to_string(n) : job.request.rid)
                     : kind == ApiKind::kCompletions ? "cmpl-" + std::to_string(n)
                                                     : "chatcmpl-" + std::to_string(n);
    if (job.request.rid.empty()) job.request.rid = id;
    if (config_.request_timeout_s > 0) {
        job.request.timeout =
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config_.request_timeout_s));
    }
    ++in_flight_;
    struct Guard {
        std::atomic<int64_t>* n;
        ~Guard() { --*n; }
    } guard{&in_flight_};
    if (job.multi()) return run_choices(job, id, s, keep);
    Result<std::shared_ptr<engine::RequestHandle>> h = engine_->submit(job.request);
    if (!h.ok()) return reply(status_reply(h.status(), config_.retry_after_s));
    const auto created = static_cast<int64_t>(std::time(nullptr));
    ResponseWriter w(job, id, created);
    bool headers_sent = false;
    // The client went away: abort, then wait for the engine to confirm (pages freed) before the socket closes.
    const auto abandon = [&] {
        engine_->abort((*h)->id(), engine::AbortReason::kClientDisconnect);
        const auto until = Clock::now() + std::chrono::seconds(10);
        while (Clock::now() < until) {
            for (const engine::RequestOutput& ev : (*h)->wait(std::chrono::milliseconds(50))) {
                if (ev.finished) return false;
            }
        }
        return false;
    };
    while (true) {
        std::vector<engine::RequestOutput> evs = (*h)->wait(std::chrono::milliseconds(20));
        if (evs.empty()) {
            if (s.peer_closed()) return abandon();
            if (engine_stalled()) return answer_stalled(s, keep, headers_sent, {(*h)->id()});
            continue;
        }
        for (const engine::RequestOutput& ev : evs) {
            w.add(ev);
            if (!job.stream) continue;
            if (!headers_sent) {
                if (ev.finished && !ev.error.ok() && ev.completion_tokens == 0) {
                    return reply(status_reply(ev.error, config_.retry_after_s));
                }
                if (!start_stream(s, keep, config_.write_timeout_s)) return abandon();
                headers_sent = true;
            }
            std::string frames = error_frame(ev);
            frames += w.sse_frames(ev);
            // An event may have nothing to send (text held back from tool markup); an empty chunk would end the
            // chunked body.
            if (!frames.empty() && !write_chunk(s, frames, config_.write_timeout_s)) return abandon();
            if (ev.finished) return write_chunk(s, "", config_.write_timeout_s) && keep;
        }
        if (!job.stream && evs.back().finished) {
            const engine::RequestOutput& last = evs.back();
            if (!last.error.ok() && last.error.code() != StatusCode::kCancelled) {
                return reply(status_reply(last.error, config_.retry_after_s));
            }
            return reply(json_reply(w.final_body()));
        }
    }
}

bool Server::run_choices(const Job& job, const std::string& id, FdStream& s, bool keep) {
    const auto reply = [&](const Reply& r) { return write_reply(s, r, keep, config_.write_timeout_s); };
    const auto n = static_cast<size_t>(job.n_choices());
    std::vector<std::shared_ptr<engine::RequestHandle>> hs;
    std::vector<bool> done;
    size_t n_done = 0;
    // Ends every choice still running and waits for the engine to confirm (pages freed).
    const auto end_all = [&](engine::AbortReason why) {
        for (size_t i = 0; i < hs.size(); ++i) {
            if (!done[i]) engine_->abort(hs[i]->id(), why);
        }
        const auto until = Clock::now() + std::chrono::seconds(10);
        for (size_t i = 0; i < hs.size() && Clock::now() < until; ++i) {
            while (!done[i] && Clock::now() < until) {
                for (const engine::RequestOutput& ev : hs[i]->wait(std::chrono::milliseconds(50))) {
                    if (ev.finished) done[i] = true;
                }
            }
        }
    };
    for (size_t i = 0; i < n; ++i) {
        Result<std::shared_ptr<engine::RequestHandle>> h = engine_->submit(job.choice_request(static_cast<int64_t>(i)));
        if (!h.ok()) {
            end_all(engine::AbortReason::kClientDisconnect);
            return reply(status_reply(h.status(), config_.retry_after_s));
        }
        hs.push_back(*h);
        done.push_back(false);
    }
    const auto created = static_cast<int64_t>(std::time(nullptr));
    std::vector<ResponseWriter> ws;
    ws.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        // /generate: each output has its own id (its request's rid); OpenAI: one id for the whole response.
        const auto index = static_cast<int64_t>(i);
        ws.emplace_back(job, job.kind == ApiKind::kGenerate ? job.choice_request(index).rid : id, created, index);
    }
    bool headers_sent = false;
    Status failed;  // the first choice that failed (non-streaming answers with it)
    const auto abandon = [&] {
        end_all(engine::AbortReason::kClientDisconnect);
        return false;
    };
    while (n_done < n) {
        bool any = false, waited = false;
        for (size_t i = 0; i < n; ++i) {
            if (done[i]) continue;
            // Wait (20 ms) on the first running choice only; look at the others without waiting.
            const auto wait = waited ? std::chrono::milliseconds(0) : std::chrono::milliseconds(20);
            waited = true;
            for (const engine::RequestOutput& ev : hs[i]->wait(wait)) {
                any = true;
                ws[i].add(ev);
                if (ev.finished) {
                    done[i] = true;
                    ++n_done;
                    if (!ev.error.ok() && ev.error.code() != StatusCode::kCancelled && failed.ok()) failed = ev.error;
                }
                if (!job.stream) continue;
                if (!headers_sent) {
                    if (ev.finished && !ev.error.ok() && ev.completion_tokens == 0) {
                        end_all(engine::AbortReason::kClientDisconnect);
                        return reply(status_reply(ev.error, config_.retry_after_s));
                    }
                    if (!start_stream(s, keep, config_.write_timeout_s)) return abandon();
                    headers_sent = true;
                }
                std::string frames = error_frame(ev);
                frames += ws[i].sse_frames(ev);
                if (n_done == n) frames += multi_choice_stream_end(ws, job);
                if (!frames.empty() && !write_chunk(s, frames, config_.write_timeout_s)) return abandon();
            }
        }
        if (!any && s.peer_closed()) return abandon();
        if (!any && engine_stalled()) {
            std::vector<int64_t> running;
            for (size_t i = 0; i < n; ++i) {
                if (!done[i]) running.push_back(hs[i]->id());
            }
            return answer_stalled(s, keep, headers_sent, running);
        }
    }
    if (job.stream) return write_chunk(s, "", config_.write_timeout_s) && keep;
    if (!failed.ok()) return reply(status_reply(failed, config_.retry_after_s));
    return reply(json_reply(multi_choice_body(ws, job)));
}

bool Server::health_generate(FdStream& s, bool keep_alive) {
    const auto reply = [&](const Reply& r) { return write_reply(s, r, keep_alive, config_.write_timeout_s); };
    if (draining_) return reply({.status = 503, .body = "draining", .content_type = "text/plain", .retry_after = ""});
    engine::GenerateRequest r;
    r.prompt = {0};
    r.params.max_new_tokens = 1;
    r.params.sampling.temperature = 0;
    Result<std::shared_ptr<engine::RequestHandle>> h = engine_->submit(r);
    if (!h.ok()) return reply(status_reply(h.status(), config_.retry_after_s));
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(config_.health_generate_timeout_s));
    while (Clock::now() < until) {
        for (const engine::RequestOutput& ev : (*h)->wait(std::chrono::milliseconds(50))) {
            if (!ev.finished) continue;
            if (!ev.error.ok()) return reply(status_reply(ev.error, config_.retry_after_s));
            return reply({.status = 200, .body = "ok", .content_type = "text/plain", .retry_after = ""});
        }
    }
    engine_->abort((*h)->id(), engine::AbortReason::kTimeout);
    return reply(error_reply(503, "generation did not finish in time", "unavailable"));
}

std::string Server::server_info() const {
    const scheduler::SchedulerConfig& sc = engine_->scheduler_config();
    json j = json::parse(info_json_, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) j = json::object();
    j["served_model_name"] = config_.served_model_name;
    j["host"] = config_.host;
    j["port"] = config_.port;
    j["api_key_set"] = !config_.api_key.empty();
    j["skip_tokenizer_init"] = engine_->tokenizer() == nullptr;
    j["chunked_prefill_size"] = sc.chunked_prefill_size;
    j["max_prefill_tokens"] = sc.max_prefill_tokens;
    j["max_running_requests"] = sc.max_running_requests;
    j["max_queue_size"] = sc.max_queue_size;
    j["context_length"] = sc.max_context_len;
    j["schedule_policy"] = std::string(scheduler::policy_name(sc.policy));
    j["enable_dynamic_chunking"] = sc.enable_dynamic_chunking;
    j["dynamic_chunking_budget_tokens"] =
        sc.dynamic_chunking_budget_tokens ? json(*sc.dynamic_chunking_budget_tokens) : json(nullptr);
    j["pp_max_micro_batch_size"] = scheduler::effective_pp_max_micro_batch_size(sc);
    {
        // The step executor's live counters (also in /metrics): how full the pipeline has been kept.
        const engine::ExecutorStats x = engine_->metrics().executor;
        json busy = json::array();
        for (const auto& st : x.stages) busy.push_back(x.active_ms > 0 ? st.busy_ms / x.active_ms : 0.0);
        j["pipeline"] = {{"micro_batch_slots", x.slots},
                         {"micro_batches_in_flight", x.in_flight},
                         {"max_micro_batches_in_flight", x.max_in_flight},
                         {"micro_batches_submitted", x.submitted},
                         {"active_s", x.active_ms / 1e3},
                         {"stage_busy_fraction", busy}};
    }
    j["watermark"] = sc.watermark;
    j["kv_pages"] = engine_->n_pages();
    j["page_size"] = kv_cache::kPageSize;
    j["ineffective_options"] = scheduler::describe_ineffective_options(sc);
    j["max_body_bytes"] = config_.max_body_bytes;
    j["max_header_bytes"] = config_.max_header_bytes;
    j["header_timeout_s"] = config_.header_timeout_s;
    j["body_timeout_s"] = config_.body_timeout_s;
    j["write_timeout_s"] = config_.write_timeout_s;
    j["keep_alive_timeout_s"] = config_.keep_alive_timeout_s;
    j["max_connections"] = config_.max_connections;
    j["max_json_depth"] = config_.max_json_depth;
    j["max_new_tokens_limit"] = config_.max_new_tokens_limit > 0 ? config_.max_new_tokens_limit : sc.max_context_len;
    j["default_max_new_tokens"] = config_.default_max_new_tokens;
    j["max_stop_strings"] = config_.max_stop_strings;
    j["max_stop_string_bytes"] = config_.max_stop_string_bytes;
    j["max_stop_token_ids"] = config_.max_stop_token_ids;
    j["max_messages"] = config_.max_messages;
    j["max_choices"] = config_.max_choices;
    j["request_timeout_s"] = config_.request_timeout_s;
    j["retry_after_s"] = config_.retry_after_s;
    j["drain_timeout_s"] = config_.drain_timeout_s;
    j["watchdog_timeout"] = config_.watchdog_timeout_s;
    j["health_generate_timeout_s"] = config_.health_generate_timeout_s;
    j["chat_template"] = chat_template_source_;
    j["tool_call_parser"] = std::string(tool_call_format_name(parse_ctx_.tool_format));
    j["reasoning_parser"] = config_.reasoning_parser;
    j["max_tools"] = config_.max_tools;
    return j.dump();
}

std::string Server::metrics_text() const {
    std::map<std::string, int64_t> rej;
    {
        std::lock_guard<std::mutex> lock(mu_);
        rej = rejections_;
    }
    return render_metrics(engine_->metrics(), rej, n_connections_.load(), !draining_);
}

}  // namespace penstock::server
