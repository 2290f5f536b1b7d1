// The disaggregation router (router.h).
#include "server/router.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <tuple>

#include "core/logging.h"
#include "server/disagg_bootstrap.h"
#include "server/fd_stream.h"
#include "server/serve_internal.h"

namespace penstock::server {

namespace http = boost::beast::http;
using json = nlohmann::json;

void add_router_options(CLI::App* cmd, RouterArgs* a) {
    cmd->add_option("--prefill", a->prefill, "a prefill server's http://host:port (repeatable)")->required();
    cmd->add_option("--decode", a->decode, "a decode server's http://host:port (repeatable)")->required();
    cmd->add_option("--host", a->host, "address to listen on")->capture_default_str();
    cmd->add_option("--port", a->port, "port to listen on (0: any free port)")->capture_default_str();
    cmd->add_option("--request-timeout", a->request_timeout_s, "seconds for one proxied request")
        ->capture_default_str();
    cmd->add_option("--max-body-bytes", a->max_body_bytes, "largest request body")->capture_default_str();
    cmd->add_option("--max-connections", a->max_connections, "connections served at once")->capture_default_str();
}

namespace {

struct Backend {
    std::string url, host;
    int port = 0;
};

// Health of each backend, refreshed by the router's checker thread; selection skips the ones down.
struct Health {
    std::vector<std::atomic<bool>> prefill_up, decode_up;
    Health(size_t np, size_t nd) : prefill_up(np), decode_up(nd) {
        for (auto& u : prefill_up) u = true;
        for (auto& u : decode_up) u = true;
    }
};

Result<Backend> parse_url(const std::string& url) {
    const std::string scheme = "http://";
    if (url.rfind(scheme, 0) != 0) return invalid_argument("'" + url + "': a server URL starts with http://");
    std::string rest = url.substr(scheme.size());
    rest = rest.substr(0, rest.find('/'));
    const size_t colon = rest.rfind(':');
    Backend b{.url = url, .host = rest.substr(0, colon), .port = 0};
    try {
        b.port = colon == std::string::npos ? 80 : std::stoi(rest.substr(colon + 1));
    } catch (const std::exception&) {
        return invalid_argument("'" + url + "': bad port");
    }
    if (b.host.empty() || b.port < 1 || b.port > 65535) return invalid_argument("'" + url + "': bad host or port");
    return b;
}

std::string reply_text(int status, const std::string& body, const std::string& type = "application/json") {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, type);
    res.keep_alive(false);
    res.body() = body;
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    return os.str();
}

std::string error_json(int status, const std::string& message) {
    return json{{"error", {{"message", message}, {"type", "router_error"}, {"code", status}}}, {"message", message}}
        .dump();
}

class Router {
public:
    Router(RouterArgs args, std::vector<Backend> prefill, std::vector<Backend> decode)
        : args_(std::move(args)),
          prefill_(std::move(prefill)),
          decode_(std::move(decode)),
          health_(prefill_.size(), decode_.size()),
          rng_(std::random_device{}()) {}

    // One round of health checks (GET /health, 2 s each): a server that does not answer 200 is skipped until it does.
    void check_health() {
        for (auto [list, up] : {std::pair{&prefill_, &health_.prefill_up}, std::pair{&decode_, &health_.decode_up}}) {
            for (size_t i = 0; i < list->size(); ++i) {
                int status = 0;
                http_get((*list)[i].host, (*list)[i].port, "/health", 2, &status);
                const bool now_up = status == 200;
                if ((*up)[i].exchange(now_up) != now_up) {
                    PENSTOCK_LOG_WARN("router: {} is {}", (*list)[i].url, now_up ? "up again" : "down");
                }
            }
        }
    }

    void serve(int fd) {
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        FdStream s(fd);
        s.set_timeout(30);
        boost::beast::flat_buffer buf;
        http::request_parser<http::string_body> parser;
        parser.body_limit(static_cast<uint64_t>(args_.max_body_bytes));
        boost::system::error_code ec;
        http::read(s, buf, parser, ec);
        if (ec) {
            if (ec == http::error::body_limit) s.write_all(reply_text(413, error_json(413, "body too large")), ec);
            return;
        }
        const auto& req = parser.get();
        std::string target(req.target());
        target = target.substr(0, target.find('?'));
        s.set_timeout(args_.request_timeout_s);
        std::string out;
        if (target == "/health" || target == "/health/readiness") {
            out = health();
        } else if (target == "/get_server_info" || target == "/server_info") {
            out = info();
        } else if (target == "/v1/models") {
            // The model the pair serves, as the first decode server reports it.
            int status = 0;
            const std::string body = http_get(decode_[0].host, decode_[0].port, "/v1/models", 5, &status);
            out = status == 200 ? reply_text(200, body)
                                : reply_text(502, error_json(502, decode_[0].url + " did not list its models"));
        } else if (target == "/generate" || target == "/v1/completions" || target == "/v1/chat/completions") {
            if (req.method() != http::verb::post) {
                out = reply_text(405, error_json(405, "use POST"));
            } else {
                proxy(target, req.body(), s);
                return;
            }
        } else {
            out = reply_text(404, error_json(404, "no route " + target + " on the router"));
        }
        s.write_all(out, ec);
    }

private:
    // 200 while at least one prefill and one decode server are up (the checker's last round), listing any down.
    std::string health() const {
        std::string down;
        bool prefill_ok = false, decode_ok = false;
        for (auto [list, up, ok] : {std::tuple{&prefill_, &health_.prefill_up, &prefill_ok},
                                    std::tuple{&decode_, &health_.decode_up, &decode_ok}}) {
            for (size_t i = 0; i < list->size(); ++i) {
                if ((*up)[i]) {
                    *ok = true;
                } else {
                    down += (down.empty() ? "" : ", ") + (*list)[i].url;
                }
            }
        }
        const std::string body = down.empty() ? "ok" : "down: " + down;
        return reply_text(prefill_ok && decode_ok ? 200 : 503, body, "text/plain");
    }

    std::string info() const {
        json j = {{"router", {{"prefill", json::array()}, {"decode", json::array()}}}};
        for (auto [name, list] : {std::pair{"prefill", &prefill_}, std::pair{"decode", &decode_}}) {
            for (const Backend& b : *list) {
                int status = 0;
                const std::string body = http_get(b.host, b.port, "/get_server_info", 5, &status);
                json e = json::parse(body, nullptr, /*allow_exceptions=*/false);
                j["router"][name].push_back({{"url", b.url}, {"info", e.is_discarded() ? json(nullptr) : e}});
            }
        }
        return reply_text(200, j.dump());
    }

    // Sends the request to a prefill and a decode server with one room; the decode server's response bytes go to the
    // client as they come.
    void proxy(const std::string& path, const std::string& body, FdStream& client) {
        boost::system::error_code ec;
        json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
        if (!j.is_object()) {
            client.write_all(reply_text(400, error_json(400, "the body must be a JSON object")), ec);
            return;
        }
        uint64_t room = 0;
        size_t pi = 0, di = 0;
        {
            std::lock_guard<std::mutex> lock(mu_);
            room = rng_() >> 1;  // 63 bits: a non-negative JSON integer
            pi = next_up(health_.prefill_up, &next_prefill_);
            di = next_up(health_.decode_up, &next_decode_);
        }
        if (pi == kNone || di == kNone) {
            client.write_all(reply_text(503, error_json(503, std::string("no healthy ") +
                                                                 (pi == kNone ? "prefill" : "decode") + " server")),
                             ec);
            return;
        }
        const Backend& p = prefill_[pi];
        const Backend& d = decode_[di];
        j["bootstrap_room"] = room;
        const bool generate = path == "/generate";
        if (generate && !j.contains("rid")) j["rid"] = "router-room-" + std::to_string(room);
        json pj = j;
        pj["bootstrap_host"] = d.host;
        pj["bootstrap_port"] = d.port;
        pj["stream"] = false;
        std::atomic<bool> decode_done{false};
        std::thread prefill_thread([&, pbody = pj.dump()] {
            int status = 0;
            const std::string answer = http_post(p.host, p.port, path, pbody, args_.request_timeout_s, &status);
            if (status == 200 || decode_done) return;
            PENSTOCK_LOG_WARN("router: prefill {} failed for room {} (HTTP {}): {}", p.url, room, status, answer);
            if (generate) {
                int s2 = 0;
                http_post(d.host, d.port, "/abort_request", json{{"rid", j["rid"]}}.dump(), 5, &s2);
            }
        });
        std::string connect_error;
        const int fd = connect_tcp(d.host, d.port, 10, &connect_error);
        if (fd < 0) {
            client.write_all(
                reply_text(502, error_json(502, "decode server " + d.url + " unreachable: " + connect_error)), ec);
        } else {
            FdStream up(fd);
            up.set_timeout(args_.request_timeout_s);
            http::request<http::string_body> req{http::verb::post, path, 11};
            req.set(http::field::host, d.host);
            req.set(http::field::content_type, "application/json");
            req.keep_alive(false);
            req.body() = j.dump();
            req.prepare_payload();
            http::write(up, req, ec);
            char chunk[16384];
            while (!ec) {
                const size_t n = up.read_some(boost::asio::buffer(chunk, sizeof(chunk)), ec);
                if (n > 0) {
                    boost::system::error_code wec;
                    client.write_all(std::string(chunk, n), wec);
                    if (wec) break;  // the client went away: closing the upstream aborts the decode request
                }
            }
            ::close(fd);
        }
        decode_done = true;
        prefill_thread.join();
    }

    static constexpr size_t kNone = ~size_t{0};
    // The next backend that is up, round robin from *cursor; kNone when all are down.
    static size_t next_up(const std::vector<std::atomic<bool>>& up, size_t* cursor) {
        for (size_t k = 0; k < up.size(); ++k) {
            const size_t i = (*cursor)++ % up.size();
            if (up[i]) return i;
        }
        return kNone;
    }

    RouterArgs args_;
    std::vector<Backend> prefill_, decode_;
    Health health_;
    std::mutex mu_;
    std::mt19937_64 rng_;
    size_t next_prefill_ = 0, next_decode_ = 0;
};

}  // namespace

Status run_router(const RouterArgs& args) {
    std::vector<Backend> prefill, decode;
    for (const std::string& u : args.prefill) {
        PENSTOCK_ASSIGN_OR_RETURN(Backend b, parse_url(u));
        prefill.push_back(std::move(b));
    }
    for (const std::string& u : args.decode) {
        PENSTOCK_ASSIGN_OR_RETURN(Backend b, parse_url(u));
        decode.push_back(std::move(b));
    }
    if (prefill.empty() || decode.empty()) return invalid_argument("the router needs --prefill and --decode servers");
    if (args.request_timeout_s <= 0 || args.max_body_bytes < 1 || args.max_connections < 1) {
        return invalid_argument("--request-timeout, --max-body-bytes and --max-connections must be positive");
    }
    install_stop_signal_handlers();
    boost::asio::io_context ioc;
    boost::system::error_code ec;
    const auto addr = boost::asio::ip::make_address(args.host, ec);
    if (ec) return invalid_argument("--host '" + args.host + "' is not an IP address");
    if (args.port < 0 || args.port > 65535) return invalid_argument("--port must be in [0, 65535]");
    boost::asio::ip::tcp::acceptor acc(ioc);
    const boost::asio::ip::tcp::endpoint ep(addr, static_cast<uint16_t>(args.port));
    acc.open(ep.protocol(), ec);
    if (!ec) acc.set_option(boost::asio::socket_base::reuse_address(true), ec);
    if (!ec) acc.bind(ep, ec);
    if (!ec) acc.listen(boost::asio::socket_base::max_listen_connections, ec);
    if (ec) return Status(StatusCode::kUnavailable, "cannot listen on " + args.host + ": " + ec.message());
    Router router(args, std::move(prefill), std::move(decode));
    std::printf("penstock router: listening on http://%s:%d (%zu prefill, %zu decode servers, pid %d)\n",
                args.host.c_str(), acc.local_endpoint().port(), args.prefill.size(), args.decode.size(),
                static_cast<int>(getpid()));
    std::fflush(stdout);
    std::atomic<int64_t> open{0};
    std::atomic<bool> stopping{false};
    std::thread checker([&] {
        while (!stopping) {
            router.check_health();
            for (int i = 0; i < 10 && !stopping; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    });
    const int lfd = acc.native_handle();
    while (!stop_requested()) {
        pollfd p{.fd = lfd, .events = POLLIN, .revents = 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        const int fd = ::accept(lfd, nullptr, nullptr);
        if (fd < 0) continue;
        if (open.load() >= args.max_connections) {
            const std::string busy = reply_text(503, error_json(503, "too many connections"));
            [[maybe_unused]] const ssize_t n = ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
            ::close(fd);
            continue;
        }
        ++open;
        std::thread([&router, &open, fd] {
            router.serve(fd);
            ::close(fd);
            --open;
        }).detach();
    }
    stopping = true;
    checker.join();
    for (int i = 0; i < 600 && open.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::printf("penstock router: stopped\n");
    std::fflush(stdout);
    return ok_status();
}

}  // namespace penstock::server
