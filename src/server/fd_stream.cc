// FdStream: poll(2) + recv/send with a deadline; connect_tcp for clients.
#include "server/fd_stream.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace penstock::server {

bool FdStream::wait_ready(short events, boost::system::error_code& ec) const {
    while (true) {
        const auto now = Clock::now();
        if (now >= deadline_) {
            ec = boost::asio::error::timed_out;
            return false;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now).count();
        pollfd p{.fd = fd_, .events = events, .revents = 0};
        const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left + 1, 1000)));
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) {
            ec = boost::system::error_code(errno, boost::system::system_category());
            return false;
        }
    }
}

size_t FdStream::recv_some(void* data, size_t size, boost::system::error_code& ec) {
    while (true) {
        const ssize_t n = ::recv(fd_, data, size, 0);
        if (n > 0) {
            bytes_read_ += static_cast<size_t>(n);
            ec = {};
            return static_cast<size_t>(n);
        }
        if (n == 0) {
            ec = boost::asio::error::eof;
            return 0;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            ec = boost::system::error_code(errno, boost::system::system_category());
            return 0;
        }
        if (!wait_ready(POLLIN, ec)) return 0;
    }
}

size_t FdStream::send_some(const void* data, size_t size, boost::system::error_code& ec) {
    while (true) {
        const ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL);
        if (n >= 0) {
            ec = {};
            return static_cast<size_t>(n);
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            ec = boost::system::error_code(errno, boost::system::system_category());
            return 0;
        }
        if (!wait_ready(POLLOUT, ec)) return 0;
    }
}

void FdStream::write_all(const std::string& data, boost::system::error_code& ec) {
    size_t done = 0;
    while (done < data.size()) {
        done += send_some(data.data() + done, data.size() - done, ec);
        if (ec) return;
    }
}

bool FdStream::peer_closed() const {
    pollfd p{.fd = fd_, .events = POLLIN | POLLRDHUP, .revents = 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return true;
    if ((p.revents & POLLIN) != 0) {
        char c = 0;
        const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK);
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return false;
}

int connect_tcp(const std::string& host, int port, double timeout_s, std::string* error) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
        *error = std::string("cannot resolve ") + host + ": " + gai_strerror(rc);
        return -1;
    }
    int fd = -1;
    for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            *error = std::string("connect: ") + std::strerror(errno);
            ::close(fd);
            fd = -1;
            continue;
        }
        pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) != 1 ||
            ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0) {
            *error = std::string("connect: ") + (soerr != 0 ? std::strerror(soerr) : "timed out");
            ::close(fd);
            fd = -1;
        }
    }
    ::freeaddrinfo(res);
    if (fd >= 0) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

}  // namespace penstock::server
