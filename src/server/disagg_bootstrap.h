// The HTTP side of prefill/decode disaggregation (SPEC §5, docs/design/disagg.md). The decode server answers
// GET /disagg/destination?room=N with the room's KvDestination (hex) once it has reserved the room's pages. A
// prefill server learns each room's decode server from the request (bootstrap_host / bootstrap_port) and fetches the
// destination from it on its transfer thread (DisaggBootstrap::resolve, retrying until the bootstrap deadline).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "disagg/kv_transfer.h"

namespace penstock::server {

// A blocking HTTP/1.1 GET (one request per connection); returns the body, or "" with `status` 0 on a transport failure.
std::string http_get(const std::string& host, int port, const std::string& path, double timeout_s, int* status);

// A blocking HTTP/1.1 POST of a JSON body; returns the response body, or "" with `status` 0 on a transport failure.
std::string http_post(const std::string& host, int port, const std::string& path, const std::string& body,
                      double timeout_s, int* status);

std::string to_hex(std::span<const uint8_t> bytes);
[[nodiscard]] Result<std::vector<uint8_t>> from_hex(std::string_view hex);

class DisaggBootstrap final {
public:
    explicit DisaggBootstrap(std::chrono::milliseconds keep) : keep_(keep) {}
    // Thread-safe. Where room's decode server is; entries older than `keep` are dropped on the way (rooms whose
    // request ended before a transfer asked for them).
    void add(uint64_t room, std::string host, int port);
    // Thread-safe: the room's destination from its decode server, polling while it answers 404 (the room's pages are
    // not reserved yet) until the deadline. Forgets the room.
    // `lazy`: this (prefill) end's --disaggregation-lazy-allocation, which the decode server checks against its own.
    [[nodiscard]] Result<disagg::KvDestination> resolve(uint64_t room, std::chrono::steady_clock::time_point deadline,
                                                        bool lazy);
    size_t size() const;

private:
    struct Peer {
        std::string host;
        int port = 0;
        std::chrono::steady_clock::time_point added;
    };
    std::chrono::milliseconds keep_;
    mutable std::mutex mu_;
    std::unordered_map<uint64_t, Peer> rooms_;
};

}  // namespace penstock::server
