// Status helpers.
#include "core/status.h"

namespace penstock {

const char* status_code_name(StatusCode code) {
    switch (code) {
        case StatusCode::kOk: return "OK";
        case StatusCode::kInvalidArgument: return "InvalidArgument";
        case StatusCode::kNotFound: return "NotFound";
        case StatusCode::kOutOfRange: return "OutOfRange";
        case StatusCode::kDataLoss: return "DataLoss";
        case StatusCode::kUnimplemented: return "Unimplemented";
        case StatusCode::kResourceExhausted: return "ResourceExhausted";
        case StatusCode::kFailedPrecondition: return "FailedPrecondition";
        case StatusCode::kUnavailable: return "Unavailable";
        case StatusCode::kDeadlineExceeded: return "DeadlineExceeded";
        case StatusCode::kCancelled: return "Cancelled";
        case StatusCode::kAborted: return "Aborted";
        case StatusCode::kInternal: return "Internal";
    }
    return "Unknown";
}

std::string Status::to_string() const {
    if (ok()) return "OK";
    return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
}

}  // namespace penstock
