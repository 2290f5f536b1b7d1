// FdStream: a blocking, deadline-bounded byte stream over a connected TCP socket's file descriptor that models
// Beast's SyncReadStream and SyncWriteStream, so the server and the bench client get Beast's HTTP parser and
// serializer with a wall-clock deadline on every read and write (slow-header and slow-body clients time out with
// asio::error::timed_out). One stream per connection, used by one thread at a time; it does not own the fd.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
#include <chrono>
#include <cstddef>
#include <string>

namespace penstock::server {

class FdStream final {
public:
    using Clock = std::chrono::steady_clock;
    explicit FdStream(int fd) : fd_(fd) {}

    // Every following read/write fails with timed_out once `deadline` passes.
    void set_deadline(Clock::time_point deadline) { deadline_ = deadline; }
    void set_timeout(double seconds) {
        deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    }
    // Bytes received since construction (tells an idle keep-alive close from a slow request).
    size_t bytes_read() const { return bytes_read_; }
    // True when the peer has closed or reset its side (pipelined bytes waiting to be read do not count).
    bool peer_closed() const;
    int fd() const { return fd_; }

    template <class MutableBufferSequence>
    size_t read_some(const MutableBufferSequence& buffers, boost::system::error_code& ec) {
        for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers);
             ++it) {
            const boost::asio::mutable_buffer b = *it;
            if (b.size() > 0) return recv_some(b.data(), b.size(), ec);
        }
        ec = {};
        return 0;
    }
    template <class MutableBufferSequence>
    size_t read_some(const MutableBufferSequence& buffers) {
        boost::system::error_code ec;
        const size_t n = read_some(buffers, ec);
        if (ec) throw boost::system::system_error(ec);
        return n;
    }
    template <class ConstBufferSequence>
    size_t write_some(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
        for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers);
             ++it) {
            const boost::asio::const_buffer b = *it;
            if (b.size() > 0) return send_some(b.data(), b.size(), ec);
        }
        ec = {};
        return 0;
    }
    template <class ConstBufferSequence>
    size_t write_some(const ConstBufferSequence& buffers) {
        boost::system::error_code ec;
        const size_t n = write_some(buffers, ec);
        if (ec) throw boost::system::system_error(ec);
        return n;
    }
    // Writes all of `data` (within the deadline).
    void write_all(const std::string& data, boost::system::error_code& ec);

private:
    // Waits until the fd is ready for `events` or the deadline passes (ec = timed_out).
    bool wait_ready(short events, boost::system::error_code& ec) const;
    size_t recv_some(void* data, size_t size, boost::system::error_code& ec);
    size_t send_some(const void* data, size_t size, boost::system::error_code& ec);

    int fd_;
    Clock::time_point deadline_ = Clock::time_point::max();
    size_t bytes_read_ = 0;
};

// Connects to host:port (numeric or resolvable host) within timeout_s; returns the fd (non-blocking, TCP_NODELAY)
// or -1 with `error` set.
int connect_tcp(const std::string& host, int port, double timeout_s, std::string* error);

}  // namespace penstock::server
