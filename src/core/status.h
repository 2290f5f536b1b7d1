// Status and Result<T>: expected failures as values (bad input, malformed checkpoint, no KV pages, peer gone).
// Invariant violations use PENSTOCK_CHECK (core/check.h) instead. Shape follows absl::Status / StatusOr.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace penstock {

enum class StatusCode {
    kOk,
    kInvalidArgument,
    kNotFound,
    kOutOfRange,
    kDataLoss,
    kUnimplemented,
    kResourceExhausted,
    kFailedPrecondition,
    kUnavailable,
    kDeadlineExceeded,
    kCancelled,
    kAborted,
    kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status final {
public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status ok_status() { return Status(); }
    bool ok() const { return code_ == StatusCode::kOk; }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }
    // "InvalidArgument: <message>", or "OK".
    std::string to_string() const;
    // Prefixes the message with context ("loading shard x: <old message>").
    Status with_context(const std::string& context) const;

private:
    StatusCode code_ = StatusCode::kOk;
    std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
inline Status not_found(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status out_of_range(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
inline Status data_loss(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
inline Status unimplemented(std::string m) { return Status(StatusCode::kUnimplemented, std::move(m)); }
inline Status resource_exhausted(std::string m) { return Status(StatusCode::kResourceExhausted, std::move(m)); }
inline Status failed_precondition(std::string m) { return Status(StatusCode::kFailedPrecondition, std::move(m)); }
inline Status internal_error(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

// Result<T>: either a value or a non-OK Status.
template <class T>
class [[nodiscard]] Result final {
public:
    Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor): absl StatusOr shape
    Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

    bool ok() const { return v_.index() == 0; }
    const Status& status() const {
        static const Status kOk;
        return ok() ? kOk : std::get<1>(v_);
    }
    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T* operator->() { return &std::get<0>(v_); }
    const T* operator->() const { return &std::get<0>(v_); }

private:
    std::variant<T, Status> v_;
};

}  // namespace penstock

#define PENSTOCK_STATUS_CONCAT_INNER(a, b) a##b
#define PENSTOCK_STATUS_CONCAT(a, b) PENSTOCK_STATUS_CONCAT_INNER(a, b)

// Returns from the current function if `expr` (a Status) is not OK.
#define PENSTOCK_RETURN_IF_ERROR(expr)                        \
    do {                                                      \
        ::penstock::Status penstock_status_ = (expr);         \
        if (!penstock_status_.ok()) return penstock_status_;  \
    } while (0)

// `PENSTOCK_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its Status.
#define PENSTOCK_ASSIGN_OR_RETURN(lhs, expr) \
    PENSTOCK_ASSIGN_OR_RETURN_IMPL(PENSTOCK_STATUS_CONCAT(penstock_result_, __LINE__), lhs, expr)
#define PENSTOCK_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
    auto tmp = (expr);                                 \
    if (!tmp.ok()) return tmp.status();                \
    lhs = std::move(tmp).value()
