// The disaggregation bootstrap over HTTP (disagg_bootstrap.h).
#include "server/disagg_bootstrap.h"

#include <unistd.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/fd_stream.h"

namespace penstock::server {

namespace http = boost::beast::http;

namespace {

template <class Body>
std::string exchange(const std::string& host, int port, http::request<Body>& req, double timeout_s, int* status) {
    *status = 0;
    std::string error;
    const int fd = connect_tcp(host, port, timeout_s, &error);
    if (fd < 0) return "";
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    FdStream s(fd);
    s.set_timeout(timeout_s);
    req.set(http::field::host, host);
    req.keep_alive(false);
    boost::system::error_code ec;
    http::write(s, req, ec);
    if (ec) return "";
    boost::beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res, ec);
    if (ec && ec != http::error::end_of_stream) return "";
    *status = static_cast<int>(res.result_int());
    return res.body();
}

}  // namespace

std::string http_get(const std::string& host, int port, const std::string& path, double timeout_s, int* status) {
    http::request<http::empty_body> req{http::verb::get, path, 11};
    return exchange(host, port, req, timeout_s, status);
}

std::string http_post(const std::string& host, int port, const std::string& path, const std::string& body,
                      double timeout_s, int* status) {
    http::request<http::string_body> req{http::verb::post, path, 11};
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    return exchange(host, port, req, timeout_s, status);
}

std::string to_hex(std::span<const uint8_t> bytes) {
    static const char* kDigits = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (uint8_t b : bytes) {
        out.push_back(kDigits[b >> 4]);
        out.push_back(kDigits[b & 15]);
    }
    return out;
}

Result<std::vector<uint8_t>> from_hex(std::string_view hex) {
    if (hex.size() % 2 != 0) return invalid_argument("hex: odd length");
    const auto digit = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    std::vector<uint8_t> out(hex.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
        const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return invalid_argument("hex: not a lowercase hex digit");
        out[i] = static_cast<uint8_t>(hi * 16 + lo);
    }
    return out;
}

void DisaggBootstrap::add(uint64_t room, std::string host, int port) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(rooms_, [&](const auto& e) { return now - e.second.added > keep_; });
    rooms_[room] = Peer{.host = std::move(host), .port = port, .added = now};
}

size_t DisaggBootstrap::size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return rooms_.size();
}

Result<disagg::KvDestination> DisaggBootstrap::resolve(uint64_t room, std::chrono::steady_clock::time_point deadline,
                                                       bool lazy) {
    Peer peer;
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = rooms_.find(room);
        if (it == rooms_.end()) return not_found("bootstrap_room " + std::to_string(room) + ": no decode server known");
        peer = it->second;
        rooms_.erase(it);
    }
    const std::string path = "/disagg/destination?room=" + std::to_string(room) + "&lazy=" + (lazy ? "1" : "0");
    const std::string where = peer.host + ":" + std::to_string(peer.port);
    for (;;) {
        const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) {
            return Status(StatusCode::kDeadlineExceeded, "bootstrap_room " + std::to_string(room) +
                                                             ": the decode server " + where +
                                                             " did not publish the room before the bootstrap deadline");
        }
        int status = 0;
        const std::string body = http_get(peer.host, peer.port, path, std::min(left, 5.0), &status);
        if (status == 200) {
            const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
            if (!j.is_object() || !j.contains("destination") || !j["destination"].is_string()) {
                return invalid_argument("bootstrap_room " + std::to_string(room) + ": " + where +
                                        " answered without a destination");
            }
            PENSTOCK_ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, from_hex(j["destination"].get<std::string>()));
            return disagg::KvDestination::decode(bytes);
        }
        if (status != 404 && status != 0) {
            return Status(StatusCode::kUnavailable, "bootstrap_room " + std::to_string(room) + ": " + where +
                                                        " answered HTTP " + std::to_string(status) + ": " + body);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

}  // namespace penstock::server
